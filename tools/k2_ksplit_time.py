# K2 with one warp a group of 16 state rows (ksplit 1) against two (ksplit 2, the k-split), in one process, on the
# shapes the plan's k2_ksplit rule sends either way: the forward on the chunked path in the plan's steps, each call
# timed between CUDA events (the benchmark's timer, medians of rounds interleaved between the two), the kernels' own
# times under torch's profiler, and each output's error against the fp64 reference on a slice of heads. For
# development: the benchmark (`python -m kda_nb.bench`, the peers in the same run) is what a speed claim quotes.
#     python tools/k2_ksplit_time.py [--rounds 7] [--out DIR]
import json, statistics, sys
from pathlib import Path
import torch
from kda_nb.bench import time_calls
from kda_nb.chunked import kda_chunked
from kda_nb.kernels import fwd_cuda, load_kernels
from kda_nb.layout import random_inputs, rel_rms
from kda_nb.plan import plan_for

CASES = [  # (name, B, T, H, seqlens): one long sequence at the anchors' heads, the long training shape, small batches
    ('one of 8192, H = 96', 1, 8192, 96, None), ('one of 8192, H = 64', 1, 8192, 64, None),
    ('one of 32768, H = 32', 1, 32768, 32, None), ('3 rows of 2048, H = 32', 3, 2048, 32, None),
    ('8 rows of 1024, H = 16', 8, 1024, 16, None), ('one of 1024, H = 4', 1, 1024, 4, None),
    ('varlen [900, 50, 17], H = 8', 1, 0, 8, [900, 50, 17]),
]

def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

def kernel_times(f, n=5):
    "ms per call of each kda_fwd kernel under torch's profiler."
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n): f()
        torch.cuda.synchronize()
    return {e.key.split('(')[0].replace('void kda::', ''): round(e.device_time_total / n / 1000, 4)
            for e in prof.key_averages() if 'kda_fwd' in e.key}

rounds, out_dir = int(arg('--rounds', 7)), arg('--out', None)
load_kernels()
rows = []
for name, B, T, H, seqlens in CASES:
    inp = random_inputs(B, T, H, 128, seqlens=seqlens, device='cuda', state='bf16', seed=1)
    p = plan_for(inp['q'], inp['v'], inp['initial_state'], inp['initial_state'], inp['cu_seqlens'], seqlens=seqlens)
    args = {k: x for k, x in inp.items() if k != 'initial_state'}
    outs = {ks: (torch.empty_like(inp['v']), torch.empty_like(inp['initial_state'])) for ks in (1, 2)}
    calls = {ks: (lambda ks=ks: fwd_cuda(**args, out=outs[ks][0], initial_state=inp['initial_state'],
                                          final_state=outs[ks][1], path='chunked', steps=p.steps, ksplit=ks))
             for ks in (1, 2)}
    times = {1: [], 2: []}
    for _ in range(rounds):                                   # interleaved: each round times both
        for ks in (1, 2): times[ks].append(statistics.median(time_calls([calls[ks]], 'cuda', warmup=3, max_calls=30, min_calls=10)))
    heads = slice(0, min(H, 2))                               # the fp64 reference on two heads
    sub = {k: (x[:, :, heads] if k in ('q', 'k', 'v', 'g', 'beta') else x[:, heads] if k == 'initial_state'
               else x[heads] if k in ('A_log', 'dt_bias') else x) for k, x in inp.items()}
    o64, s64 = kda_chunked(**sub)
    row = dict(case=name, B=B, T=T, H=H, steps=p.steps, plan_ksplit=p.ksplit)
    for ks in (1, 2):
        calls[ks]()
        row[f'ksplit{ks}_ms'] = round(statistics.median(times[ks]), 4)
        row[f'ksplit{ks}_range'] = [round(min(times[ks]), 4), round(max(times[ks]), 4)]
        row[f'ksplit{ks}_kernels'] = kernel_times(calls[ks])
        row[f'ksplit{ks}_err_out'] = rel_rms(outs[ks][0][:, :, heads], o64)
        row[f'ksplit{ks}_err_state'] = rel_rms(outs[ks][1][:, heads], s64)
    rows.append(row)
    print(f"{name:>28}: steps {p.steps}, plan ksplit {p.ksplit} | ksplit 1 {row['ksplit1_ms']:.3f} ms "
          f"(err {row['ksplit1_err_out']:.1e}) | ksplit 2 {row['ksplit2_ms']:.3f} ms (err {row['ksplit2_err_out']:.1e}) "
          f"| {row['ksplit1_ms'] / row['ksplit2_ms']:.2f}x", flush=True)
    print(f"{'':>30}K1/K2 ksplit 1: {row['ksplit1_kernels']}; ksplit 2: {row['ksplit2_kernels']}", flush=True)
if out_dir:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / 'k2_ksplit_time.json').write_text(json.dumps(rows, indent=1))
