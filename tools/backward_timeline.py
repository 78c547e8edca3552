"""Where a training step's GPU time goes in time, not only in sum: a trace of a few back-to-back calls under torch's
profiler, each kernel's start and end on its stream, and the stretches where no kernel runs on the GPU at all.

    python tools/backward_timeline.py [--H 64] [--case fixed|six|8x1024|long] [--what step|backward] [--calls 3]
                                      [--host 25] [--out DIR]

The cases are the benchmark's train group (`kda_nb.bench.cases.train_cases`: the anchors' three layouts at T = 8192
and --H, or `long`, one sequence of 32768 at H = 32), with its inputs (`make_inputs`). `step` is the step that group
times (`kda_nb.bench.backends.train_step`: `kda_nb.kda`'s forward and the backward from fixed upstream gradients);
`backward` is `kda_backward_cuda` alone from the same upstream gradients, with bf16 gradients as the autograd asks. The
calls run back to back with no synchronisation between them (the host may run ahead), after warm-up calls. Prints the
last call's kernels in the order they start (offsets in us from that call's first), the idle stretches longer than
--gap us over all the traced calls, and the busy share; with --host, the host's time to issue a call, events around
each of 10 calls (the benchmark's way), where a call makes the host wait for the GPU (`train_stages.host_waits`) and
the host's slowest Python functions; writes timeline.json. (`benchmarks/timeline_h200_step_T8192_H64.json` was taken
by this tool's first version, 44899b7, on `kda_nb.layout.random_inputs` of the same shape.)"""
from __future__ import annotations

import argparse, cProfile, io, json, pstats, statistics, tempfile, time
from pathlib import Path

import torch

from train_stages import host_waits            # the same check (tools/ is on a script's path)

from kda_nb import kda
from kda_nb.backward_kernels import kda_backward_cuda
from kda_nb.bench.backends import train_step
from kda_nb.bench.cases import make_inputs, train_cases

CASES = {'fixed': 'fixed', 'six': 'varlen six', '8x1024': 'varlen 1024 x 8'}


def pick_case(name: str, H: int):
    "The benchmark's training case `name` (a key of CASES at H heads, or 'long')."
    if name == 'long': return train_cases(Hs=())[-1]
    return next(c for c in train_cases(Hs=(H,), long_T=0) if c.name == CASES[name])


def make_call(what: str, case):
    "`call()` for one step (or backward) of `case`, as the benchmark's train group makes it."
    step = train_step(lambda **x: kda(**x, backend='cuda'), make_inputs(case, 'cuda'), case)
    if what == 'step': return step
    inp = make_inputs(case, 'cuda')
    go, gs = step.upstream
    return lambda: kda_backward_cuda(**inp, grad_out=go, grad_state=gs, grads_dtype=torch.bfloat16)


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
    ap.add_argument('--H', type=int, default=64)
    ap.add_argument('--case', choices=(*CASES, 'long'), default='fixed')
    ap.add_argument('--what', choices=('step', 'backward'), default='step')
    ap.add_argument('--calls', type=int, default=3)
    ap.add_argument('--gap', type=float, default=10.0, help='idle stretches shorter than this (us) are not listed')
    ap.add_argument('--out', default='.')
    ap.add_argument('--host', type=int, default=0, help="also the host's own time: that many python functions of one call by cProfile")
    a = ap.parse_args()
    case = pick_case(a.case, a.H)
    call = make_call(a.what, case)
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
        waits = host_waits(call)
        print(f"the host waited for the GPU {sum(waits.values())} times in a call" +
              ''.join(f"\n  {n} x {where}" for where, n in waits.items()))
        pr = cProfile.Profile(); pr.enable(); call(); pr.disable(); torch.cuda.synchronize()
        buf = io.StringIO(); pstats.Stats(pr, stream=buf).sort_stats('tottime').print_stats(a.host)
        print('\n'.join(l for l in buf.getvalue().splitlines() if l.strip())[:6000])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5): call()
    end.record(); torch.cuda.synchronize()
    print(f"{a.what}, {case}: {start.elapsed_time(end) / 5:.3f} ms a call between CUDA events (5 back to back)")
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
