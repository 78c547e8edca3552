# K2 in blocks of 4 warps (one a group of 16 state rows) against 8 and 16 (two a group, the k-split: 64 or 128 rows
# a block), in one process, on the shapes the plan's k2_warps rule is about: the forward on the chunked path in the
# plan's steps, each call timed between CUDA events (the benchmark's timer, medians of rounds that interleave the
# widths), the kernels' own times under torch's profiler, and each output's error against the fp64 reference on two
# heads. For development: the benchmark (`python -m kda_nb.bench`, the peers in the same run) is what a speed claim
# quotes.
#     python tools/k2_widths_time.py [--rounds 7] [--out DIR]
import json, statistics, sys
from pathlib import Path
import torch
from kda_nb.bench import time_calls
from kda_nb.chunked import kda_chunked
from kda_nb.kernels import fwd_cuda, load_kernels
from kda_nb.layout import random_inputs, rel_rms
from kda_nb.plan import K2_WIDTHS, plan_for
from backward_stages import timed_kernels       # the same timing (tools/ is on a script's path)

CASES = [  # (name, B, T, H, seqlens): one long sequence at the anchors' heads, the long training shape, small batches
    ('one of 8192, H = 96', 1, 8192, 96, None), ('one of 8192, H = 64', 1, 8192, 64, None),
    ('one of 32768, H = 32', 1, 32768, 32, None), ('3 rows of 2048, H = 32', 3, 2048, 32, None),
    ('8 rows of 1024, H = 16', 8, 1024, 16, None), ('one of 1024, H = 4', 1, 1024, 4, None),
    ('varlen [900, 50, 17], H = 8', 1, 0, 8, [900, 50, 17]),
]

def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

def kernel_times(f):
    "ms per call of each kda_fwd kernel under torch's profiler (backward_stages.py's timing)."
    return {k.split('(')[0].replace('void kda::', ''): round(v, 4) for k, v in timed_kernels(f)['kernels'].items()
            if 'kda_fwd' in k}

rounds, out_dir = int(arg('--rounds', 7)), arg('--out', None)
load_kernels()
rows = []
for name, B, T, H, seqlens in CASES:
    inp = random_inputs(B, T, H, 128, seqlens=seqlens, device='cuda', state='bf16', seed=1)
    p = plan_for(inp['q'], inp['v'], inp['initial_state'], inp['initial_state'], inp['cu_seqlens'], seqlens=seqlens)
    args = {k: x for k, x in inp.items() if k != 'initial_state'}
    outs = {w: (torch.empty_like(inp['v']), torch.empty_like(inp['initial_state'])) for w in K2_WIDTHS}
    calls = {w: (lambda w=w: fwd_cuda(**args, out=outs[w][0], initial_state=inp['initial_state'],
                                       final_state=outs[w][1], path='chunked', steps=p.steps, k2_warps=w))
             for w in K2_WIDTHS}
    times = {w: [] for w in K2_WIDTHS}
    for _ in range(rounds):                                   # interleaved: each round times every width
        for w in K2_WIDTHS:
            times[w].append(statistics.median(time_calls([calls[w]], 'cuda', warmup=3, max_calls=30, min_calls=10)))
    heads = slice(0, min(H, 2))                               # the fp64 reference on two heads
    sub = {k: (x[:, :, heads] if k in ('q', 'k', 'v', 'g', 'beta') else x[:, heads] if k == 'initial_state'
               else x[heads] if k in ('A_log', 'dt_bias') else x) for k, x in inp.items()}
    o64, s64 = kda_chunked(**sub)
    row = dict(case=name, B=B, T=T, H=H, steps=p.steps, plan_k2_warps=p.k2_warps)
    for w in K2_WIDTHS:
        calls[w]()
        row[f'w{w}_ms'] = round(statistics.median(times[w]), 4)
        row[f'w{w}_range'] = [round(min(times[w]), 4), round(max(times[w]), 4)]
        row[f'w{w}_kernels'] = kernel_times(calls[w])
        row[f'w{w}_err_out'] = rel_rms(outs[w][0][:, :, heads], o64)
        row[f'w{w}_err_state'] = rel_rms(outs[w][1][:, heads], s64)
    rows.append(row)
    print(f"{name:>28}: steps {p.steps}, plan {p.k2_warps} warps | " + " | ".join(
        f"{w} warps {row[f'w{w}_ms']:.3f} ms (err {row[f'w{w}_err_out']:.1e})" for w in K2_WIDTHS), flush=True)
    print(' ' * 30 + '; '.join(f"{w}: {row[f'w{w}_kernels']}" for w in K2_WIDTHS), flush=True)
if out_dir:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / 'k2_widths_time.json').write_text(json.dumps(rows, indent=1))
