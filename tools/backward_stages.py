"""Where the GPU backward's time goes: each kernel's time (torch.profiler, CUDA activity) in one call of
`kda_nb.backward_kernels.kda_backward_cuda`, its total and peak memory, for the chunks' states in fp32 and bf16.

    python tools/backward_stages.py [--T 8192] [--H 64] [--N 1] [--out DIR] [--once] [--before COMMIT] [--sequential]
                                    [--ksplit 1 2] [--segments 1 4 8] [--states bf16] [--interleave 9]

Prints a table per states dtype and writes backward_stages.json to --out (default: the current folder). With
--before, the kernels of that commit of main (built from git history) are timed too, in the same process, and
the gradients of the two builds are compared bit for bit. The earlier build runs with that commit's own
kda_backward_cuda (its kda_nb/backward_kernels.py from git), so that a change of the kernels' arguments is timed
as it was. Each build is also timed as kda_nb.kda's autograd calls it for bf16 inputs: bf16 token gradients. With
--sequential, this tree is timed a second time with its two passes one after the other on the caller's stream (they
run side by side on two streams since bc78446). With --ksplit, this tree is timed once for each k-split of the passes
named (warps sharing a group of 16 state rows) instead of with the kernels' own choice; --states keeps one states dtype.
A call's time is the median of 7 rounds of 5 calls between CUDA events (the rounds' range is kept too); the
kernels' times are torch's profiler's. Those rounds run build after build, so a drift of the machine's speed during
the run falls on one build more than another; --interleave N adds N rounds in which every build is timed once, the
order rotated from round to round (`interleaved_ms` and `interleaved_range` in each row): the comparison to quote
when two builds are within a few percent."""
from __future__ import annotations

import argparse, functools, inspect, json, statistics, subprocess, time, types
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

from kda_nb import backward_kernels, kernels
from kda_nb.backward_kernels import kda_backward_cuda
from kda_nb.layout import random_inputs


def backward_at(commit: str, ext, path: str | None = None):
    """The kda_backward_cuda of `commit`'s kda_nb/backward_kernels.py (from git, or the copy at `path` on a machine
    without the history), calling the extension `ext` (that commit's build)."""
    src = (Path(path).read_text() if path else
           subprocess.run(['git', 'show', f'{commit}:kda_nb/backward_kernels.py'], capture_output=True, text=True, check=True).stdout)
    path = path or 'kda_nb/backward_kernels.py'
    mod = types.ModuleType(f'kda_nb.backward_kernels_{commit[:7]}')
    mod.__package__ = 'kda_nb'
    exec(compile(src, f'{commit[:7]}:{path}', 'exec'), mod.__dict__)
    mod.load_kernels = lambda **kw: ext
    return mod.kda_backward_cuda


def timed_kernels(call, reps: int = 5) -> dict:
    """`call()`'s time between CUDA events (the median of 7 rounds of `reps` calls, and the rounds' range) and each
    CUDA kernel's time per call under torch's profiler, slowest first (tools/train_stages.py uses it too)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rounds = []                                  # the median of 7 rounds of `reps` calls: one round of 5 spread by
    for _ in range(7):                           # about 0.6 ms between builds with the same kernels (2026-12-02)
        start.record()
        for _ in range(reps): call()
        end.record(); torch.cuda.synchronize()
        rounds.append(start.elapsed_time(end) / reps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps): call()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:60]] += e.device_time / 1e3 / reps          # ms per call
    return dict(ms=statistics.median(rounds), ms_range=[min(rounds), max(rounds)],
                kernels=dict(sorted(per.items(), key=lambda kv: -kv[1])))


def interleaved(calls: dict, rounds: int = 9, reps: int = 5, timer=None) -> dict:
    """Each of `calls` (label -> call) timed in `rounds` rounds of `reps` calls, every call once a round and the order
    rotated from round to round, so that a drift of the machine's speed falls on all alike: the median and the range
    of each call's rounds, ms per call. `timer(call, reps)` gives one round's ms per call (default: CUDA events)."""
    if timer is None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        def timer(call, reps):
            start.record()
            for _ in range(reps): call()
            end.record(); torch.cuda.synchronize()
            return start.elapsed_time(end) / reps
    names, got = list(calls), {k: [] for k in calls}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]: got[k].append(timer(calls[k], reps))
    return {k: dict(ms=statistics.median(v), ms_range=[min(v), max(v)]) for k, v in got.items()}


def inputs(T: int, H: int, N: int) -> dict:
    "The backward's inputs at this shape (seed 0), and upstream gradients of the output and the final state (torch's generator)."
    seqlens = None if N == 1 else [T // N] * N
    inp = random_inputs(1, T if N == 1 else 0, H, 128, seqlens=seqlens, seed=0, device='cuda', state='fp32', A_log=None)
    return dict(inp, grad_out=torch.randn_like(inp['v']), grad_state=torch.randn_like(inp['initial_state']))


def stages(backward, T: int, H: int, N: int, states_dtype: torch.dtype, reps: int = 5) -> dict:
    inp = inputs(T, H, N)
    call = lambda: backward(**inp, states_dtype=states_dtype)
    call(); torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call(); torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 1e9
    t = timed_kernels(call, reps)
    return dict(T=T, H=H, N=N, states=str(states_dtype).split('.')[-1], total_ms=t['ms'], total_ms_range=t['ms_range'],
                extra_peak_gb=peak, kernels=t['kernels'])


def sequential(backward):
    "`backward` (this tree's) with the two passes one after the other on the caller's stream instead of side by side."
    @contextmanager
    def same_stream(main, n=2): yield (main,) * n     # every pass on the caller's stream
    @functools.wraps(backward)                   # (its signature, for as_bf16)
    def call(**kw):
        saved, backward_kernels.passes_beside = backward_kernels.passes_beside, same_stream
        try: return backward(**kw)
        finally: backward_kernels.passes_beside = saved
    return call


def as_bf16(backward):
    "`backward` returning the token gradients (dq, dk, dv, dg, dbeta) in bf16, as kda_nb.kda's autograd hands them over."
    if 'grads_dtype' in inspect.signature(backward).parameters:
        return lambda **kw: backward(**kw, grads_dtype=torch.bfloat16)
    def rounded(**kw):
        g = backward(**kw)
        return tuple(x.to(torch.bfloat16) for x in g[:5]) + tuple(g[5:])
    return rounded


def same_bits(a, dt, before) -> str:
    "Whether this tree's gradients and the earlier build's are the same bits, on the --T/--H/--N problem (with varlen)."
    out = []
    for seqlens in ([a.T // 2 + 37, a.T // 2 - 37], [1, 15, 16, 17, 300]):
        inp = random_inputs(1, 0, a.H, 128, seqlens=seqlens, seed=3, device='cuda', state='fp32', A_log=None)
        gen = torch.Generator(device='cuda').manual_seed(4)
        go = torch.randn(inp['v'].shape, generator=gen, device='cuda')
        gs = torch.randn(inp['initial_state'].shape, generator=gen, device='cuda')
        new = kda_backward_cuda(**inp, grad_out=go, grad_state=gs, states_dtype=dt)
        old = before(**inp, grad_out=go, grad_state=gs, states_dtype=dt)
        same = all(torch.equal(x, y) for x, y in zip(new, old))
        worst = max(((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item() for x, y in zip(new, old))
        out.append(f"{seqlens}: {'same bits' if same else f'differ (worst {worst:.1e} of the largest)'}")
    return '; '.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--T', type=int, default=8192)
    ap.add_argument('--H', type=int, default=64)
    ap.add_argument('--N', type=int, default=1)
    ap.add_argument('--out', default='.')
    ap.add_argument('--once', action='store_true', help="one call with the default states and nothing else (for a profiler)")
    ap.add_argument('--before', default=None, help='a commit of main whose kernels are timed beside this tree\'s')
    ap.add_argument('--before-py', default=None, help="that commit's kda_nb/backward_kernels.py, where git has no history")
    ap.add_argument('--sequential', action='store_true', help="also this tree with its two passes one after the other")
    ap.add_argument('--ksplit', type=int, nargs='+', default=None, help="time this tree with each of these k-splits of the passes")
    ap.add_argument('--segments', type=int, nargs='+', default=None,
                    help="time this tree with the passes cut into each of these numbers of launches (0: the library's rule)")
    ap.add_argument('--states', choices=('fp32', 'bf16'), default=None, help="one states dtype only")
    ap.add_argument('--interleave', type=int, default=0, metavar='ROUNDS',
                    help="also time the builds in this many rounds, every build once a round, the order rotated")
    a = ap.parse_args()
    before = None
    if a.before:
        kernels.KERNEL_VERSIONS['before'] = a.before
        before = backward_at(a.before, kernels.load_kernels(version='before'), a.before_py)
    if a.once:
        seqlens = None if a.N == 1 else [a.T // a.N] * a.N
        inp = random_inputs(1, a.T if a.N == 1 else 0, a.H, 128, seqlens=seqlens, seed=0, device='cuda', state='fp32', A_log=None)
        kda_backward_cuda(**inp, grad_out=torch.randn_like(inp['v']), grad_state=torch.randn_like(inp['initial_state']))
        torch.cuda.synchronize()
        return
    rows = []
    ours = ([('this tree', kda_backward_cuda)] if not a.ksplit else
            [(f'this tree, ksplit {k}', functools.wraps(kda_backward_cuda)(functools.partial(kda_backward_cuda, ksplit=k)))
             for k in a.ksplit])
    if a.segments:
        ours = [(f'this tree, segments {k or "rule"}', functools.wraps(kda_backward_cuda)(functools.partial(kda_backward_cuda, segments=k)))
                for k in a.segments]
    builds = ours + ([(f'before ({a.before[:7]})', before)] if before is not None else [])
    if a.sequential: builds.insert(1, ('this tree, passes one after the other', sequential(kda_backward_cuda)))
    # what kda_nb.kda's autograd gets for bf16 inputs: bf16 token gradients (written by the kernel, where this tree's
    # kda_backward_cuda takes grads_dtype; else fp32 ones rounded by .to afterwards, as the op did until then)
    builds += [(f'{label}, bf16 gradients', as_bf16(backward)) for label, backward in builds]
    dtypes = {'fp32': torch.float32, 'bf16': torch.bfloat16}
    for dt in dtypes.values() if a.states is None else (dtypes[a.states],):
        for label, backward in builds:
            t = time.time()
            r = stages(backward, a.T, a.H, a.N, dt)
            r['build'] = label
            rows.append(r)
            print(f"\n{label}: T = {a.T}, H = {a.H}, N = {a.N}, states {r['states']}: backward {r['total_ms']:.2f} ms, "
                  f"extra peak {r['extra_peak_gb']:.2f} GB ({time.time() - t:.0f} s)")
            for name, ms in list(r['kernels'].items())[:12]: print(f"  {ms:8.3f} ms  {name}")
        if a.interleave:
            inp = inputs(a.T, a.H, a.N)
            calls = {label: functools.partial(backward, **inp, states_dtype=dt) for label, backward in builds}
            for label, t in interleaved(calls, a.interleave).items():
                row = next(r for r in rows if r['build'] == label and r['states'] == str(dt).split('.')[-1])
                row['interleaved_ms'], row['interleaved_range'] = t['ms'], t['ms_range']
                print(f"interleaved, {label}, states {row['states']}: {t['ms']:.3f} ms [{t['ms_range'][0]:.3f}, {t['ms_range'][1]:.3f}]")
            del inp, calls
        if before is not None: print(f"gradients, states {dt}: " + same_bits(a, dt, before))
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / 'backward_stages.json').write_text(json.dumps(rows, indent=1))


if __name__ == '__main__':
    main()
