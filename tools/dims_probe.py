"""Head dims below 128 on the GPU: the forward through `kda_nb.fwd` with `kda_nb.plan.NATIVE_DIMS` off (the 'pad' route:
zero-padded copies to K = V = 128) and on (the kernels' instances with DIMS on the tensors as they are), on the same
inputs, interleaved in one process: each case's outputs and final states compared (they must be equal bit for bit) and
its time, the median of CUDA-event timings of many calls, for both. What the switch waits for (04b_plan, 04_kernels
*Head dims below 128*).

    python tools/dims_probe.py                  # the default cases, a table on stdout
    python tools/dims_probe.py --out probe.json # and the rows as JSON

Needs an SM90 GPU and nvcc (the kernels' build); elsewhere it says why and exits 0.
"""
import argparse
import json
import statistics
import sys

import torch

# (name, B, T, H, K, V, seqlens): prefill of one long sequence (K1 + K2 in pipeline steps), a batch of mid-length
# sequences (K1 + K2), a decode batch (K3), fla's K = V = 64 and mixes
CASES = [
    ('prefill T=8192 H=32', 1, 8192, 32, 64, 64, None),
    ('prefill T=8192 H=32 K=128 V=64', 1, 8192, 32, 128, 64, None),
    ('prefill T=8192 H=32 K=64 V=128', 1, 8192, 32, 64, 128, None),
    ('varlen 64 x 300 H=16', 1, 0, 16, 64, 64, [300] * 64),
    ('decode 256 x 1 H=32', 256, 1, 32, 64, 64, None),
    ('decode 256 x 1 H=32 K=96 V=40', 256, 1, 32, 96, 40, None),
]


def timed(fn, reps: int) -> float:
    "The median of `reps` CUDA-event timings of `fn` (ms), after two warm-up calls."
    for _ in range(2): fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def run_case(name, B, T, H, K, V, seqlens, reps: int) -> dict:
    import kda_nb.plan as P
    from kda_nb.api import fwd
    from kda_nb.layout import random_inputs
    inp = random_inputs(B, T, H, K, V, seqlens=seqlens, device='cuda', seed=1)
    N = B if inp['cu_seqlens'] is None else inp['cu_seqlens'].numel() - 1
    out = torch.empty_like(inp['v'])
    fs = torch.empty(N, H, V, K, device='cuda')
    call = lambda: fwd(**inp, out=out, final_state=fs)
    row = dict(case=name, K=K, V=V)
    got = {}
    for native in (False, True, False, True):          # interleaved: off, on, off, on
        P.NATIVE_DIMS = native
        p = P.plan_for(inp['q'], inp['v'], inp['initial_state'], fs, inp['cu_seqlens'], seqlens=seqlens)
        key = 'native' if native else 'padded'
        row[f'{key}_path'], row[f'{key}_routes'] = p.path, [r for r, _ in p.routes]
        ms = timed(call, reps)
        row[f'{key}_ms'] = min(ms, row.get(f'{key}_ms', ms))
        got[key] = (out.clone(), fs.clone())
    P.NATIVE_DIMS = False
    row['equal'] = all(torch.equal(a, b) for a, b in zip(got['padded'], got['native']))
    row['speedup'] = row['padded_ms'] / row['native_ms']
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', help='write the rows as JSON here')
    ap.add_argument('--reps', type=int, default=50, help='timed calls per case and setting (default 50)')
    args = ap.parse_args(argv)
    from kda_nb.kernels import kernels_unavailable_reason
    why = kernels_unavailable_reason()
    if why is not None:
        print(f"dims_probe: skipped here: {why}")
        return 0
    rows = []
    print(f"{'case':34} {'padded ms':>10} {'native ms':>10} {'speedup':>8}  equal  paths (padded / native)")
    for case in CASES:
        r = run_case(*case, reps=args.reps)
        rows.append(r)
        print(f"{r['case']:34} {r['padded_ms']:10.4f} {r['native_ms']:10.4f} {r['speedup']:8.3f}  {str(r['equal']):5}  "
              f"{r['padded_path']} {r['padded_routes']} / {r['native_path']} {r['native_routes']}")
    if args.out:
        with open(args.out, 'w') as f: json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)
    return 0 if all(r['equal'] for r in rows) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
