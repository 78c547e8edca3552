"""Time the chunked kernels (K1 + K2) of this tree against those of an earlier commit, in one process, on the same inputs.

    python tools/chunked_before_after.py COMMIT

Both versions are built here (the earlier one from git history, as kda_nb_v3 is) and called through
`fwd_cuda`. GPU time per call: the benchmark's CUDA-event timer over two input sets, the two versions
alternating for three rounds, the best median of each. Prints a markdown table and whether the two versions'
outputs and final states are bitwise equal on every case.
"""
import statistics
import sys

import torch

from kda_nb import kernels
from kda_nb.bench import time_calls
from kda_nb.layout import random_inputs

# (name, H, sequence lengths or None for one fixed-length row of 8192 tokens, state dtype)
CASES = [(f'{name}', H, lens, sd) for H in (96, 64) for name, lens in
         (('8 x 1024', [1024] * 8), ('six sequences', [2500, 700, 3000, 1, 1000, 991]), ('fixed', None))
         for sd in (torch.bfloat16, torch.float32)]
CASES += [(f'{N} x {65536 // N}', 32, [65536 // N] * N, torch.float32) for N in (64, 512, 4096)]


def main(commit: str):
    kernels.KERNEL_VERSIONS['before'] = commit
    kernels.load_kernels(); kernels.load_kernels(version='before')
    print(f"before: csrc/ of {commit}; after: this tree")
    print("| case | H | state | before ms | after ms | before/after | same bits |")
    print("|---|---:|---|---:|---:|---:|---|")
    for name, H, lens, sd in CASES:
        sets = []
        for s in range(2):
            inp = (random_inputs(1, 0, H, 128, seqlens=lens, device='cuda', seed=s) if lens
                   else random_inputs(1, 8192, H, 128, device='cuda', seed=s))
            inp['initial_state'] = inp['initial_state'].to(sd)
            sets.append(inp)
        best, first = {}, {}
        for _ in range(3):
            for version in ('before', kernels.KERNEL_VERSION):
                bufs = [(torch.empty_like(i['v']), torch.empty_like(i['initial_state'])) for i in sets]
                calls = [lambda i=i, b=b, v=version: kernels.fwd_cuda(**i, out=b[0], final_state=b[1], version=v)
                         for i, b in zip(sets, bufs)]
                ms = statistics.median(time_calls(calls, 'cuda', warmup=4, max_calls=40, min_calls=20))
                best[version] = min(best.get(version, float('inf')), ms)
                first.setdefault(version, bufs[0])
        same = all(torch.equal(x, y) for x, y in zip(first['before'], first[kernels.KERNEL_VERSION]))
        b, a = best['before'], best[kernels.KERNEL_VERSION]
        print(f"| {name} | {H} | {str(sd)[6:]} | {b:.3f} | {a:.3f} | {b / a:.3f} | {same} |", flush=True)


if __name__ == '__main__':
    if (why := kernels.kernels_unavailable_reason()) is not None: sys.exit(f"chunked_before_after: cannot run here: {why}")
    if len(sys.argv) != 2: sys.exit(__doc__)
    main(sys.argv[1])
