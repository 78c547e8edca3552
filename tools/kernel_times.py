"""K1 and K2 alone: device time per call under the torch profiler, for the kernels of this tree or of a commit.

    python tools/kernel_times.py [COMMIT]

One version per process (two builds of the kernels in one process fail to launch K1), so to compare two
versions run it twice. Mean of 10 calls after 3, same inputs every call (no rotation: not the benchmark).
A batch that runs as a pipeline (one long sequence) shows the sums of its steps' launches, which overlap.
`benchmarks/v4_steps_h200.md` (*Afterwards*, section 4) quotes a run of it.
"""
import sys

import torch

from kda_nb import kernels
from kda_nb.bench import version_call
from kda_nb.layout import random_inputs

CASES = [('8 x 1024', 96, [1024] * 8), ('six', 96, [2500, 700, 3000, 1, 1000, 991]), ('fixed', 96, None),
         ('8 x 1024', 64, [1024] * 8), ('4096 x 16', 32, [16] * 4096)]


def kernel_times(version: str, label: str, calls: int = 10):
    "Print K1's and K2's mean device time per call (ms) on each case."
    kernels.load_kernels(version=version)
    for name, H, lens in CASES:
        inp = (random_inputs(1, 0, H, 128, seqlens=lens, device='cuda', seed=0) if lens
               else random_inputs(1, 8192, H, 128, device='cuda', seed=0))
        out, fs = torch.empty_like(inp['v']), torch.empty_like(inp['initial_state'])
        call = version_call(version, inp, out, fs, seqlens=lens)
        for _ in range(3): call()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls): call()
            torch.cuda.synchronize()
        tot = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                k = 'K1' if 'prepare' in e.name else 'K2' if 'recurrence' in e.name else None
                if k: tot[k] = tot.get(k, 0) + e.device_time / calls
        print(f"{label:>10} | {name:>9} H{H}: K1 {tot.get('K1', 0) / 1e3:.3f} ms  K2 {tot.get('K2', 0) / 1e3:.3f} ms", flush=True)
        del inp, out, fs
        torch.cuda.empty_cache()


if __name__ == '__main__':
    if (why := kernels.kernels_unavailable_reason()) is not None: sys.exit(f"kernel_times: cannot run here: {why}")
    if len(sys.argv) > 1:
        kernels.KERNEL_VERSIONS['commit'] = sys.argv[1]
        kernel_times('commit', sys.argv[1][:10])
    else:
        kernel_times(kernels.KERNEL_VERSION, 'this tree')
