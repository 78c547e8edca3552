"""Where a training step's time goes: each kernel's time (torch.profiler, CUDA activity) in one forward + backward
of `kda_nb.kda` on the benchmark's training cases (`kda_nb.bench`'s train group, the same inputs), and the step's
time between CUDA events.

    python tools/train_stages.py [--H 64 96] [--long] [--out DIR]

Prints one table per case and writes train_stages.json to --out (default: the current folder). --long adds the
one sequence of 32768 tokens at H = 32."""
from __future__ import annotations

import argparse, json
from pathlib import Path

import torch

from backward_stages import timed_kernels          # the same timing (tools/ is on a script's path)

from kda_nb import kda
from kda_nb.bench.backends import train_step
from kda_nb.bench.cases import make_inputs, train_cases


def profile_case(case, reps: int = 5) -> dict:
    call = train_step(lambda **x: kda(**x, backend='cuda'), make_inputs(case, 'cuda'), case)
    for _ in range(3): call()
    torch.cuda.synchronize()
    t = timed_kernels(call, reps)
    return dict(case=case.name, H=case.H, T=case.T, N=case.N, step_ms=t['ms'], step_ms_range=t['ms_range'],
                kernels=t['kernels'])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--H', type=int, nargs='+', default=[64])
    ap.add_argument('--long', action='store_true', help='also one sequence of 32768 tokens at H = 32')
    ap.add_argument('--out', default='.')
    a = ap.parse_args()
    cases = train_cases(Hs=a.H, long_T=32768 if a.long else 0)
    rows = []
    for case in cases:
        r = profile_case(case)
        rows.append(r)
        print(f"\n{case.name}, H = {case.H}, T = {case.T}: step {r['step_ms']:.3f} ms "
              f"({r['step_ms_range'][0]:.3f}-{r['step_ms_range'][1]:.3f})")
        for name, ms in list(r['kernels'].items())[:14]: print(f"  {ms:8.3f} ms  {name}")
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / 'train_stages.json').write_text(json.dumps(rows, indent=1))


if __name__ == '__main__':
    main()
