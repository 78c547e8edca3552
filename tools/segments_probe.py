"""One long sequence at few heads, whole against in segments on today's kernels: the stacked call
(kda_nb.segments.kda_segmented, against segment_cost's model) or, with --passes, the three passes
(kda_nb.segments.kda_in_passes, each pass and the chain timed alone too, the chain both as the torch scan and as the
kernel kda_entry_scan, and the whole call in each manner of its first two passes, kda_nb.segments.FIRST_PASSES, and
with the kernel's chain). The time of each and the segmented output's distance from the whole call's.

    python tools/segments_probe.py [--cases 65536x4,131072x8,65536x16] [--segs 1024,2048,4096,8192] [--out FILE]
    python tools/segments_probe.py --passes [--out FILE]      # the cases and segments of passes_probe_h200.json
    python tools/segments_probe.py --passes --quick           # only the whole call and the passes with the chain as one
                                                              # kernel: in turn, and with one K1 shared
    python tools/segments_probe.py --train [--out FILE]       # training steps: the gradient whole and in segments

Prints one line per (case, segment length) and writes the rows as JSON (default benchmarks/segments_probe.json, or
benchmarks/passes_probe.json with --passes, benchmarks/passes_train_probe.json with --train). --train times one
training step (forward with autograd, backward from fixed upstream gradients) of one long sequence: kda's gradient
whole (the kernels' chain over the whole sequence) against its gradient in segments (kda_nb.segments.
gradient_in_segments, forced with forced_backward(passes=...)), and the gradients' distance."""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kda_nb.plan                                                   # noqa: E402
from kda_nb.api import kda                                          # noqa: E402
from kda_nb.layout import random_inputs, rel_rms                     # noqa: E402
from kda_nb.plan import forced_backward, sm_count                                    # noqa: E402
from kda_nb.segments import FIRST_PASSES, entry_states, kda_in_passes, kda_segmented, segment_cost, segment_grid   # noqa: E402

# (1536 at H = 4: 43 segments, 344 blocks of K2 a pass on 132 SMs, nearer K2's three an SM than 2048's 256)
PASSES_CASES = ((65536, 4, (1024, 1536, 2048, 4096, 8192)), (131072, 8, (4096, 8192, 16384)), (262144, 4, (8192, 16384, 32768)),
                (65536, 16, (4096, 8192)), (32768, 32, (8192,)))


def timed(fn, reps: int = 10) -> float:
    "Median milliseconds of `fn()` by CUDA events, after two warm-up calls."
    for _ in range(2): fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--cases', default='65536x4,131072x8,65536x16,32768x32', help='TxH, comma-separated')
    ap.add_argument('--segs', default='1024,2048,4096,8192', help='segment lengths (multiples of 16)')
    ap.add_argument('--out', default=None, help="the JSON written (default: benchmarks/segments_probe.json, or "
                                               "benchmarks/passes_probe.json with --passes)")
    ap.add_argument('--passes', action='store_true', help='time kda_in_passes (three passes) instead of the stacked call')
    ap.add_argument('--train', action='store_true', help='time training steps, whole against through kda_in_passes')
    ap.add_argument('--quick', action='store_true', help='with --passes: the whole call and the kernel-chain manners only')
    a = ap.parse_args(argv)
    if not torch.cuda.is_available(): ap.error('needs a CUDA device')
    if a.passes: return passes_probe(a.out or 'benchmarks/passes_probe.json', a.quick)
    if a.train: return train_probe(a.out or 'benchmarks/passes_train_probe.json')
    a.out = a.out or 'benchmarks/segments_probe.json'
    sms, rows = sm_count(torch.device('cuda')), []
    for case in a.cases.split(','):
        T, H = (int(x) for x in case.split('x'))
        inp = random_inputs(1, T, H, 128, device='cuda', seed=0)
        args = [inp[n] for n in ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias')]
        s0 = inp['initial_state']
        with torch.inference_mode():
            whole = lambda: kda(*args, initial_state=s0)
            o_w, s_w = whole()
            ms_w = timed(whole)
            print(f"T = {T}, H = {H}: whole {ms_w:.3f} ms (model {segment_cost([T], H, sms).total_us / 1e3:.3f})", flush=True)
            rows.append(dict(T=T, H=H, seg_tokens=0, ms=ms_w, model_ms=segment_cost([T], H, sms).total_us / 1e3))
            for seg in (int(x) for x in a.segs.split(',')):
                if seg >= T: continue
                run = lambda: kda_segmented(*args, seg_tokens=seg, initial_state=s0)
                o, s = run()
                ms = timed(run)
                e_o, e_s = rel_rms(o, o_w), rel_rms(s, s_w)
                model = segment_cost([T], H, sms, seg).total_us / 1e3
                print(f"  segments of {seg}: {ms:.3f} ms (model {model:.3f}), out vs whole {e_o:.1e}, state {e_s:.1e}",
                      flush=True)
                rows.append(dict(T=T, H=H, seg_tokens=seg, ms=ms, model_ms=model, err_out=e_o, err_state=e_s))
    env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, sms=sms)
    Path(a.out).write_text(json.dumps(dict(env=env, rows=rows), indent=1))
    print(f"wrote {a.out}")
    return 0


def kernel_chain_manners(args, seg, s0, o_w, s_w) -> dict:
    """The passes with the chain as one kernel, timed: in turn ('scan_kernel'), with one K1 among them
    ('shared_k1_kernel'), so with K2's states only in the first two ('shared_k1_states'), and those copying only the
    records' parts the states read ('shared_k1_lean', kda_nb.plan.SPLIT_STATES_LEAN), and the first two as one launch,
    with and without the lean records ('shared_k1_paired', 'shared_k1_paired_lean', kda_nb.plan.SPLIT_PAIRED_STATES);
    each checked against the whole call, and the shared manners against each other (the same bits: neither the states
    only, the lean records nor the one launch change a state)."""
    P = kda_nb.plan
    manners, saved = {}, (P.SPLIT_SCAN_KERNEL, P.SPLIT_STATES_LEAN, P.SPLIT_PAIRED_STATES)
    P.SPLIT_SCAN_KERNEL = True
    try:
        made = {}
        for name, kw in (('scan_kernel', dict(first='serial', share_k1=False)),
                         ('shared_k1_kernel', dict(share_k1=True, states_only=False)),
                         ('shared_k1_states', dict(share_k1=True, states_only=True)),
                         ('shared_k1_lean', dict(share_k1=True, states_only=True)),
                         ('shared_k1_paired', dict(share_k1=True, states_only=True)),
                         ('shared_k1_paired_lean', dict(share_k1=True, states_only=True))):
            P.SPLIT_STATES_LEAN, P.SPLIT_PAIRED_STATES = name.endswith('lean'), 'paired' in name
            with torch.no_grad():
                manners[f'ms_{name}'] = timed(lambda: kda_in_passes(*args, segments=seg, initial_state=s0, **kw))
                made[name] = o_f, s_f = kda_in_passes(*args, segments=seg, initial_state=s0, **kw)
            assert rel_rms(o_f.float(), o_w.float()) < 1e-2 and rel_rms(s_f, s_w) < 1e-2, name
        a = made['shared_k1_kernel']
        for name in ('shared_k1_states', 'shared_k1_lean', 'shared_k1_paired', 'shared_k1_paired_lean'):
            assert torch.equal(a[0], made[name][0]) and torch.equal(a[1], made[name][1]), f"{name}: the same bits"
    finally:
        P.SPLIT_SCAN_KERNEL, P.SPLIT_STATES_LEAN, P.SPLIT_PAIRED_STATES = saved
    return manners


def passes_probe(out: str, quick: bool = False) -> int:
    "One sequence whole and in three passes (gate g = -8: slowly decaying, so that entry states matter), each pass timed."
    rows = []
    for T, H, segs in PASSES_CASES:
        inp = random_inputs(1, T, H, 128, device='cuda', seed=0, state='fp32', gate='g=-8')
        args = [inp[n] for n in ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias')]
        q, k, v, g, b, A, dt = args
        s0 = inp['initial_state']
        with torch.inference_mode():
            with kda_nb.plan.whole_calls():             # the whole call (the plan's rule would send it to the passes)
                o_w, s_w = kda(*args, initial_state=s0)
                ms_w = timed(lambda: kda(*args, initial_state=s0))
            print(f"T = {T}, H = {H}: whole {ms_w:.3f} ms", flush=True)
            rows.append(dict(T=T, H=H, seg=0, ms=ms_w))
            for seg in segs:
                if quick:
                    m = kernel_chain_manners(args, seg, s0, o_w, s_w)
                    print(f"  segments of {seg}: " + ', '.join(f"{k} {v:.3g}" for k, v in m.items()), flush=True)
                    rows.append(dict(T=T, H=H, seg=seg, **m))
                    continue
                cu, grid, _ = segment_grid(1, T, seg, None, q.device)
                eye = torch.eye(128, dtype=torch.float32, device='cuda').expand(cu.numel() - 1, H, 128, 128).contiguous()
                zero_v = torch.zeros_like(v)
                call = lambda values, st: kda(q, k, values, g, b, A, dt, initial_state=st, cu_seqlens=cu,
                                              state_dtype=torch.float32, check_seqlens=False)
                t_m, t_x = timed(lambda: call(zero_v, eye)), timed(lambda: call(v, None))
                (_, M), (_, X) = call(zero_v, eye), call(v, None)
                t_chain = timed(lambda: entry_states(s0, X, M, grid, kernel=False))           # the torch scan
                t_chain_k = timed(lambda: entry_states(s0, X, M, grid, kernel=True, check=False))   # the kernel
                e_chain = rel_rms(entry_states(s0, X, M, grid, kernel=True), entry_states(s0, X, M, grid, kernel=False))
                t_out = timed(lambda: call(v, entry_states(s0, X, M, grid, kernel=False)))   # (the chain's time included)
                ms = timed(lambda: kda_in_passes(*args, segments=seg, initial_state=s0))
                o, s = kda_in_passes(*args, segments=seg, initial_state=s0)
                e_o, e_s = rel_rms(o.float(), o_w.float()), rel_rms(s, s_w)
                manners = {}                    # the whole of kda_in_passes with its first two passes in each manner
                for first in FIRST_PASSES + ('shared_k1',):      # and the three passes with one K1 among them
                    kw = dict(share_k1=True) if first == 'shared_k1' else dict(first=first, share_k1=False)
                    manners[first] = timed(lambda: kda_in_passes(*args, segments=seg, initial_state=s0, **kw))
                    o_f, s_f = kda_in_passes(*args, segments=seg, initial_state=s0, **kw)
                    assert rel_rms(o_f.float(), o_w.float()) < 1e-2 and rel_rms(s_f, s_w) < 1e-2, first
                manners.update({k[3:]: v for k, v in kernel_chain_manners(args, seg, s0, o_w, s_w).items() if k[:3] == 'ms_'})
                print(f"  segments of {seg}: {ms:.3f} ms ({ms_w / ms:.2f}x) | passes {t_m:.3f} {t_x:.3f} "
                      f"{t_out - t_chain:.3f}, chain {t_chain:.3f} (kernel {t_chain_k:.3f}, {e_chain:.1e} off the scan) | "
                      f"vs whole: out {e_o:.1e}, state {e_s:.1e} | "
                      + ', '.join(f"{f} {t:.3f}" for f, t in manners.items()), flush=True)
                rows.append(dict(T=T, H=H, seg=seg, ms=ms, m_pass=t_m, x_pass=t_x, chain=t_chain,
                                 chain_kernel=t_chain_k, err_chain_kernel=e_chain,
                                 out_pass=t_out - t_chain, err_out=e_o, err_state=e_s,
                                 **{f'ms_{f}': t for f, t in manners.items()}))
    Path(out).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), indent=1))
    print(f"wrote {out}")
    return 0


TRAIN_CASES = ((32768, 32, (4096, 8192)), (65536, 16, (4096, 8192, 16384)), (65536, 4, (2048, 4096)),
               (131072, 8, (4096, 8192)))
NAMES = ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias')


def train_probe(out: str) -> int:
    """One training step of one long sequence (kda's forward as the plan runs it, its backward from fixed upstream
    gradients): the gradient whole, and in segments (kda_nb.segments.gradient_in_segments, forced) at each segment
    length, plain and lean (kda_nb.plan.SPLIT_BACKWARD_LEAN: the same bits, checked)."""
    rows = []
    for T, H, segs in TRAIN_CASES:
        inp = random_inputs(1, T, H, 128, device='cuda', seed=0, state='fp32', gate='g=-8')
        leaves = {n: inp[n].clone().requires_grad_() for n in NAMES + ('initial_state',)}
        gen = torch.Generator(device='cuda').manual_seed(1)
        d_out = torch.randn(inp['v'].shape, generator=gen, device='cuda').to(inp['v'].dtype)
        d_state = torch.randn(inp['initial_state'].shape, generator=gen, device='cuda')
        def step(passes):
            for x in leaves.values(): x.grad = None
            with forced_backward(passes=passes):
                o, s = kda(*(leaves[n] for n in NAMES), initial_state=leaves['initial_state'], output_final_state=True)
                torch.autograd.backward([o, s], [d_out.to(o.dtype), d_state.to(s.dtype)])
            return {n: x.grad.clone() for n, x in leaves.items()}
        g_w = step(0)
        ms_w = timed(lambda: step(0), reps=5)
        print(f"T = {T}, H = {H}: whole step {ms_w:.3f} ms", flush=True)
        rows.append(dict(T=T, H=H, seg=0, ms=ms_w))
        for seg in segs:
            g_s = step(seg)
            ms = timed(lambda: step(seg), reps=5)
            errs = {n: rel_rms(g_s[n].float(), g_w[n].float()) for n in g_w}
            worst = max(errs, key=errs.get)
            saved, kda_nb.plan.SPLIT_BACKWARD_LEAN = kda_nb.plan.SPLIT_BACKWARD_LEAN, True
            try:                           # the lean first step (kda_nb.plan.SPLIT_BACKWARD_LEAN): the same bits, timed
                same = all(torch.equal(a, b) for a, b in zip(step(seg).values(), g_s.values()))
                ms_lean = timed(lambda: step(seg), reps=5)
            finally: kda_nb.plan.SPLIT_BACKWARD_LEAN = saved
            assert same, f"T = {T}, H = {H}, segments of {seg}: the lean gradient in segments changed the bits"
            print(f"  gradient in segments of {seg}: {ms:.3f} ms ({ms_w / ms:.2f}x), lean {ms_lean:.3f} ms "
                  f"({ms_w / ms_lean:.2f}x) | gradients vs whole: worst {worst} {errs[worst]:.1e}", flush=True)
            rows.append(dict(T=T, H=H, seg=seg, ms=ms, ms_lean=ms_lean, grad_err=errs))
    Path(out).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
