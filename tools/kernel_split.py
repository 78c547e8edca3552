# Per-kernel split of kda_nb's forward on the anchor cases, for development: medians of 30 calls, each kernel
# alone under the torch profiler, and (--versions v4,v3) earlier kernels in the same process, on the plan's
# path. It is not the benchmark (no input rotation, no peers): `python -m kda_nb.bench` is. (Until v5 K2's
# width and stages could be forced with environment variables; they went with the house refactor, 25b5c2b.
# v1 and v2 are not runnable any more: their numbers stay in benchmarks/.)
#     python tools/kernel_split.py [--versions v4,v3] [--fla]
import statistics, sys, torch
from kda_nb.bench import time_calls, version_call
from kda_nb.layout import ANCHOR_HEADS, ANCHOR_T, anchor_workloads, random_inputs, rel_rms
from kda_nb.kernels import KERNEL_VERSION, load_kernels
from kda_nb.peers import fla_forward, fla_unavailable_reason
def bench(f, n=30):
    "Median ms of `n` calls of `f` (CUDA events), by the benchmark's timer."
    return statistics.median(time_calls([f], 'cuda', warmup=3, max_calls=n, min_calls=n))
def kernel_split(f):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5): f()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if 'kda_fwd' in e.key: out[e.key.split('(')[0].split('<')[0].replace('void kda::', '')[-22:]] = e.device_time_total / e.count / 1000 if hasattr(e, 'device_time_total') else e.cuda_time_total / e.count / 1000
    return out
def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default
old = [v for v in arg('--versions', '').split(',') if v]
for v in old: load_kernels(version=v)
rows = []
for H in ANCHOR_HEADS:
    for name, seqlens in anchor_workloads().items():
        inp = random_inputs(1, ANCHOR_T, H, 128, seqlens=seqlens, device='cuda', state='bf16', seed=1)
        out = torch.empty_like(inp['v']); fs = torch.empty_like(inp['initial_state'])
        line = f"H={H} {name:>15}:"
        f = version_call(KERNEL_VERSION, inp, out, fs, seqlens=seqlens)
        line += f" cur {bench(f):.3f}"
        split = kernel_split(f)
        line += " | " + " ".join(f"{k} {v:.3f}" for k, v in split.items())
        for v in old:
            o1 = torch.empty_like(out); f1 = torch.empty_like(fs)
            g1 = version_call(v, inp, o1, f1, seqlens=seqlens)
            t1 = bench(g1); line += f" | {v} {t1:.3f} rel(cur,{v}) out {rel_rms(out, o1):.1e} state {rel_rms(fs.float(), f1.float()):.1e}"
        print(line, flush=True)
        rows.append((H, name, inp, seqlens))
if fla_unavailable_reason() is None and '--fla' in sys.argv:
    for H, name, inp, seqlens in rows:
        tf = bench(lambda: fla_forward(**inp), n=20)
        print(f"H={H} {name:>15}: fla {tf:.3f}", flush=True)
