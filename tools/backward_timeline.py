"""Where a training step's GPU time goes in time, not only in sum: a trace of a few back-to-back calls under torch's
profiler, each kernel's start and end on its stream, and the stretches where no kernel runs on the GPU at all.

    python tools/backward_timeline.py [--T 8192] [--H 64] [--N 1] [--what step|backward] [--calls 3] [--out DIR]

`step` is what the benchmark's train group times: `kda_nb.kda`'s forward and the backward from upstream gradients of
out and the final state (bf16 inputs, fp32 states); `backward` is `kda_backward_cuda` alone with bf16 gradients, as
the autograd calls it. The calls run back to back with no synchronisation between them (the host may run ahead), after
warm-up calls. Prints the last call's kernels in the order they start (offsets in us from that call's first kernel),
the idle stretches longer than --gap us over all the traced calls, and the busy share; writes timeline.json."""
from __future__ import annotations

import argparse, cProfile, io, json, pstats, statistics, tempfile, time
from pathlib import Path

import torch

import kda_nb
from kda_nb.backward_kernels import kda_backward_cuda
from kda_nb.layout import random_inputs


def make_call(what: str, T: int, H: int, N: int):
    seqlens = None if N == 1 else [T // N] * N
    inp = random_inputs(1, T if N == 1 else 0, H, 128, seqlens=seqlens, seed=0, device='cuda', state='fp32', A_log=None)
    gen = torch.Generator(device='cuda').manual_seed(1)
    go = torch.randn(inp['v'].shape, generator=gen, device='cuda').to(torch.bfloat16)
    gs = torch.randn(inp['initial_state'].shape, generator=gen, device='cuda')
    if what == 'backward':
        return lambda: kda_backward_cuda(**inp, grad_out=go, grad_state=gs, grads_dtype=torch.bfloat16)
    names = ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias', 'initial_state')
    leaves = {n: inp[n].clone().requires_grad_() for n in names}
    rest = dict(scale=inp['scale'], lower_bound=inp['lower_bound'], cu_seqlens=inp['cu_seqlens'])
    def call():
        for x in leaves.values(): x.grad = None
        out, fs = kda_nb.kda(**leaves, **rest)
        torch.autograd.backward([out, fs], [go, gs])
    return call


def kernels_of(trace: dict) -> list[dict]:
    "The trace's GPU activities (kernels, copies, sets) as dicts of name, stream, start and end in us."
    out = []
    for e in trace.get('traceEvents', []):
        if e.get('ph') == 'X' and e.get('cat') in ('kernel', 'gpu_memcpy', 'gpu_memset'):
            out.append(dict(name=e['name'], stream=e.get('args', {}).get('stream', e.get('tid')), start=float(e['ts']),
                            end=float(e['ts']) + float(e['dur'])))
    return sorted(out, key=lambda k: k['start'])


def idle_stretches(ks: list[dict], gap: float) -> tuple[list[tuple[float, float, str, str]], float, float]:
    "Stretches of more than `gap` us with no GPU activity between the first start and the last end, and busy / wall."
    gaps, busy, end, last = [], 0.0, ks[0]['start'], ks[0]['name']
    t0 = ks[0]['start']
    for k in ks:
        if k['start'] > end:
            if k['start'] - end > gap: gaps.append((end - t0, k['start'] - end, last, k['name']))
        if k['end'] > end:
            busy += k['end'] - max(k['start'], end)
            end, last = k['end'], k['name']
    return gaps, busy, end - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--T', type=int, default=8192)
    ap.add_argument('--H', type=int, default=64)
    ap.add_argument('--N', type=int, default=1)
    ap.add_argument('--what', choices=('step', 'backward'), default='step')
    ap.add_argument('--calls', type=int, default=3)
    ap.add_argument('--gap', type=float, default=10.0, help='idle stretches shorter than this (us) are not listed')
    ap.add_argument('--out', default='.')
    ap.add_argument('--host', type=int, default=0, help="also the host's own time: that many python functions of one call by cProfile")
    a = ap.parse_args()
    call = make_call(a.what, a.T, a.H, a.N)
    for _ in range(3): call()
    torch.cuda.synchronize()
    if a.host:
        host = []
        for _ in range(10):                       # the host's time to issue a call (no synchronisation inside)
            t = time.perf_counter(); call(); host.append((time.perf_counter() - t) * 1e3)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(10)]
        for s, e in ev: s.record(); call(); e.record()
        torch.cuda.synchronize()
        per = [s.elapsed_time(e) for s, e in ev]
        print(f"host time to issue a call: median {statistics.median(host):.3f} ms (range {min(host):.3f} - {max(host):.3f}); "
              f"events around each of 10 back-to-back calls (the benchmark's way): median {statistics.median(per):.3f} ms")
        pr = cProfile.Profile(); pr.enable(); call(); pr.disable(); torch.cuda.synchronize()
        buf = io.StringIO(); pstats.Stats(pr, stream=buf).sort_stats('tottime').print_stats(a.host)
        print('\n'.join(l for l in buf.getvalue().splitlines() if l.strip())[:6000])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5): call()
    end.record(); torch.cuda.synchronize()
    print(f"{a.what}, T = {a.T}, H = {a.H}, N = {a.N}: {start.elapsed_time(end) / 5:.3f} ms a call between CUDA events "
          f"(5 back to back)")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(a.calls):
            with torch.profiler.record_function(f'call {i}'): call()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        prof.export_chrome_trace(f'{d}/t.json')
        trace = json.loads(Path(f'{d}/t.json').read_text())
    ks = kernels_of(trace)
    calls = sorted((float(e['ts']), float(e['ts']) + float(e['dur'])) for e in trace['traceEvents']
                   if e.get('ph') == 'X' and str(e.get('name', '')).startswith('call '))
    print(f"host time a call (record_function ranges, us): {[round(b - s) for s, b in calls]}")
    per_call = len(ks) // a.calls
    last = ks[-per_call:]
    t0 = last[0]['start']
    streams = {s: i for i, s in enumerate(dict.fromkeys(k['stream'] for k in ks))}
    print(f"\nthe last call's {len(last)} GPU activities (us from its first; stream index):")
    for k in last:
        print(f"  {k['start'] - t0:8.1f} {k['end'] - t0:8.1f} {k['end'] - k['start']:7.1f}  s{streams[k['stream']]}  {k['name'][:90]}")
    gaps, busy, wall = idle_stretches(ks, a.gap)
    print(f"\nall {a.calls} calls: GPU busy {busy / 1e3:.3f} of {wall / 1e3:.3f} ms ({100 * busy / wall:.1f}%); "
          f"idle stretches over {a.gap:g} us (at, length, after, before):")
    for at, length, before, after in gaps:
        print(f"  {at:9.1f} {length:8.1f}  after {before[:50]} | before {after[:50]}")
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / 'timeline.json').write_text(json.dumps(dict(args=vars(a), kernels=ks, gaps=gaps, busy_us=busy,
                                                               wall_us=wall), indent=1))


if __name__ == '__main__':
    main()
