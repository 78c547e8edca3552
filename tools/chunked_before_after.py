"""Time the chunked kernels (K1 + K2) of this tree against those of an earlier commit, on the same inputs.

    python tools/chunked_before_after.py COMMIT

Each version runs in a process of its own (two builds of the kernels in one process fail to launch K1: "invalid
argument"), the earlier one built from git history as kda_nb_v3 is, and called through its binding on the plan's path (`kda_nb.bench.version_call`): before,
after, before, after, on the same machine, the same seeded inputs. GPU time per call: the benchmark's
CUDA-event timer over two input sets; the better of each version's two runs. Prints a markdown table and
whether the two versions' outputs and final states are bitwise equal on every case.
"""
import statistics
import sys

import torch

from kda_nb import kernels
from kda_nb.bench import time_calls, version_call
from kda_nb.layout import random_inputs

# (name, H, sequence lengths or None for one fixed-length row of 8192 tokens, state dtype)
CASES = [(f'{name}', H, lens, sd) for H in (96, 64) for name, lens in
         (('8 x 1024', [1024] * 8), ('six sequences', [2500, 700, 3000, 1, 1000, 991]), ('fixed', None))
         for sd in (torch.bfloat16, torch.float32)]
CASES += [(f'{N} x {65536 // N}', 32, [65536 // N] * N, torch.float32) for N in (64, 512, 4096)]


def digest(x: torch.Tensor) -> str:
    "sha256 of a tensor's bytes: equal digests, bitwise equal tensors."
    import hashlib
    return hashlib.sha256(x.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def run_one(version: str, out_path: str):
    "Time every case with one version of the kernels; save the times and the first input set's results."
    kernels.load_kernels(version=version)
    times, results = [], []
    for name, H, lens, sd in CASES:
        sets = []
        for s in range(2):
            inp = (random_inputs(1, 0, H, 128, seqlens=lens, device='cuda', seed=s) if lens
                   else random_inputs(1, 8192, H, 128, device='cuda', seed=s))
            inp['initial_state'] = inp['initial_state'].to(sd)
            sets.append(inp)
        bufs = [(torch.empty_like(i['v']), torch.empty_like(i['initial_state'])) for i in sets]
        calls = [version_call(version, i, b[0], b[1], seqlens=lens) for i, b in zip(sets, bufs)]
        times.append(statistics.median(time_calls(calls, 'cuda', warmup=4, max_calls=60, min_calls=20)))
        results.append(tuple(digest(x) for x in bufs[0]))
        del sets, bufs, calls
        torch.cuda.empty_cache()
    torch.save(dict(times=times, results=results), out_path)


def main(commit: str):
    import subprocess, tempfile
    from pathlib import Path
    tmp = Path(tempfile.mkdtemp())
    runs = {}
    for k, version in enumerate(('before', kernels.KERNEL_VERSION) * 2):
        path = tmp / f'{k}.pt'
        subprocess.run([sys.executable, __file__, commit, '--one', version, str(path)], check=True)
        runs.setdefault(version, []).append(torch.load(path))
    before, after = runs['before'], runs[kernels.KERNEL_VERSION]
    print(f"before: csrc/ of {commit}; after: this tree")
    print("| case | H | state | before ms | after ms | before/after | same bits |")
    print("|---|---:|---|---:|---:|---:|---|")
    for c, (name, H, lens, sd) in enumerate(CASES):
        b = min(r['times'][c] for r in before)
        a = min(r['times'][c] for r in after)
        same = before[0]['results'][c] == after[0]['results'][c]
        print(f"| {name} | {H} | {str(sd)[6:]} | {b:.3f} | {a:.3f} | {b / a:.3f} | {same} |", flush=True)


if __name__ == '__main__':
    if (why := kernels.kernels_unavailable_reason()) is not None: sys.exit(f"chunked_before_after: cannot run here: {why}")
    if len(sys.argv) < 2: sys.exit(__doc__)
    kernels.KERNEL_VERSIONS['before'] = sys.argv[1]
    if len(sys.argv) == 5 and sys.argv[2] == '--one': run_one(sys.argv[3], sys.argv[4])
    else: main(sys.argv[1])
