"""Where a training step's time goes: each kernel's time (torch.profiler, CUDA activity) in one forward + backward
of `kda_nb.kda` on the benchmark's training cases (`kda_nb.bench`'s train group, the same inputs), the step's
time between CUDA events, and where a step makes the host wait for the GPU (torch's sync debug mode).

    python tools/train_stages.py [--H 64 96] [--long] [--out DIR]

Prints one table per case and writes train_stages.json to --out (default: the current folder). --long adds the
one sequence of 32768 tokens at H = 32."""
from __future__ import annotations

import argparse, json, traceback, warnings
from collections import Counter
from pathlib import Path

import torch

from backward_stages import timed_kernels          # the same timing (tools/ is on a script's path)

from kda_nb import kda
from kda_nb.bench.backends import train_step
from kda_nb.bench.cases import make_inputs, train_cases


def host_waits(call) -> dict:
    """Where one step makes the host wait for the GPU: torch's sync debug mode warns at each synchronizing call (a copy
    to the host, `.item()`, ...); each is counted by the innermost line of kda_nb (or of the caller) that led to it."""
    seen = Counter()
    def note(message, category, filename, lineno, file=None, line=None):
        if 'synchroniz' not in str(message): return                  # only the sync debug mode's warnings
        frames = [f for f in traceback.extract_stack()[:-1] if 'kda_nb' in f.filename] or traceback.extract_stack()[-3:-2]
        f = frames[-1]
        seen[f"{Path(f.filename).name}:{f.lineno} {f.line}"] += 1
    torch.cuda.synchronize()
    old, warnings.showwarning = warnings.showwarning, note
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('always')
            torch.cuda.set_sync_debug_mode('warn')
            try: call()
            finally: torch.cuda.set_sync_debug_mode('default')
    finally:
        warnings.showwarning = old
    torch.cuda.synchronize()
    return dict(seen)


def profile_case(case, reps: int = 5) -> dict:
    call = train_step(lambda **x: kda(**x, backend='cuda'), make_inputs(case, 'cuda'), case)
    for _ in range(3): call()
    torch.cuda.synchronize()
    t = timed_kernels(call, reps)
    return dict(case=case.name, H=case.H, T=case.T, N=case.N, step_ms=t['ms'], step_ms_range=t['ms_range'],
                kernels=t['kernels'], host_waits=host_waits(call))


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
        print(f"  the host waited for the GPU {sum(r['host_waits'].values())} times in a step" +
              ''.join(f"\n    {n} x {where}" for where, n in r['host_waits'].items()))
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / 'train_stages.json').write_text(json.dumps(rows, indent=1))


if __name__ == '__main__':
    main()
