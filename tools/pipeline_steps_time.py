# One long sequence on K1 + K2 in 1, 2, 4, 6 and 8 pipeline steps, in one process: each call timed between CUDA
# events (the benchmark's timer, medians of rounds that interleave the step counts), the kernels' own times under
# torch's profiler (K1 and K2 summed over the steps; in a pipeline they overlap, so their sum is more than the call),
# the workspace each takes (every chunk's record, whatever the steps), and the outputs' difference from one step's (the carry is
# fp32, so they should be the same bits). For development: the benchmark (`python -m kda_nb.bench`, the peers in the
# same run) is what a speed claim quotes.
#     python tools/pipeline_steps_time.py [--rounds 7] [--out DIR]
import json, statistics, sys
from pathlib import Path
import torch
from kda_nb.bench import time_calls
from kda_nb.kernels import fwd_cuda, load_kernels, workspace_bytes
from kda_nb.layout import random_inputs
from kda_nb.plan import plan_for
from backward_stages import timed_kernels       # the same timing (tools/ is on a script's path)

STEPS = (1, 2, 4, 6, 8)
CASES = [('one of 8192, H = 96', 8192, 96), ('one of 8192, H = 64', 8192, 64), ('one of 32768, H = 32', 32768, 32)]

def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

rounds, out_dir = int(arg('--rounds', 7)), arg('--out', None)
load_kernels()
rows = []
for name, T, H in CASES:
    inp = random_inputs(1, T, H, 128, device='cuda', state='bf16', seed=1)
    p = plan_for(inp['q'], inp['v'], inp['initial_state'], inp['initial_state'], inp['cu_seqlens'])
    args = {k: x for k, x in inp.items() if k != 'initial_state'}
    outs = {s: (torch.empty_like(inp['v']), torch.empty_like(inp['initial_state'])) for s in STEPS}
    calls = {s: (lambda s=s: fwd_cuda(**args, out=outs[s][0], initial_state=inp['initial_state'],
                                       final_state=outs[s][1], path='chunked', steps=s)) for s in STEPS}
    times = {s: [] for s in STEPS}
    for _ in range(rounds):
        for s in STEPS:
            times[s].append(statistics.median(time_calls([calls[s]], 'cuda', warmup=3, max_calls=30, min_calls=10)))
    chunks, inputs = -(-T // 16), sum(inp[k].numel() * inp[k].element_size() for k in ('q', 'k', 'v', 'g', 'beta'))
    row = dict(case=name, T=T, H=H, plan_steps=p.steps, input_bytes=inputs)
    for s in STEPS:
        calls[s]()
        torch.cuda.synchronize()
        kern = {k.split('(')[0].replace('void kda::', '').replace('kda::', ''): round(v, 4)
                for k, v in timed_kernels(calls[s])['kernels'].items() if 'kda_fwd' in k}
        row[f's{s}'] = dict(ms=round(statistics.median(times[s]), 4), range=[round(min(times[s]), 4), round(max(times[s]), 4)],
                            kernels=kern, workspace_bytes=workspace_bytes(chunks, H),
                            same_bits_as_1=bool(torch.equal(outs[s][0], outs[1][0]) and torch.equal(outs[s][1], outs[1][1])))
    rows.append(row)
    print(f"{name} (plan: {p.steps} steps; inputs {inputs / 2**20:.0f} MiB)", flush=True)
    for s in STEPS:
        r = row[f's{s}']
        print(f"   {s} steps: {r['ms']:.3f} ms [{r['range'][0]:.3f}, {r['range'][1]:.3f}]  kernels {r['kernels']}  "
              f"workspace {r['workspace_bytes'] / 2**20:.0f} MiB ({r['workspace_bytes'] / inputs:.2f} of the inputs)"
              f"{'' if r['same_bits_as_1'] else '  DIFFERENT BITS FROM 1 STEP'}", flush=True)
if out_dir:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / 'pipeline_steps_time.json').write_text(json.dumps(rows, indent=1))
