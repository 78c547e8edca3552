"""Where the time of a small call goes on this machine: kda_nb.fwd's host time against its binding's, the
GPU time of K3, a DecodeStep's host time, and what a trivial PyTorch op and a synchronization cost here.

    python tools/host_time.py

Host time per call: 400 calls issued back to back, no synchronization between them, the median of 7 rounds.
End to end: perf_counter around the call and torch.cuda.synchronize(), the median of 300. "binding": the
extension's kda_decode called directly. "K3 GPU": 50 calls captured in a CUDA graph and replayed.
benchmarks/k3_slices_h200.md holds the H200's output.
"""
import cProfile
import io
import pstats
import statistics
import sys
import time

import torch

import kda_nb
from kda_nb import api
from kda_nb.kernels import kernels_unavailable_reason, load_kernels
from kda_nb.layout import random_inputs
from k3_before_after import e2e_us, graph_us     # the timers both tools use (tools/ is on sys.path when run as a script)


def per_call_us(f, n: int = 400, reps: int = 7) -> float:
    for _ in range(20): f()
    torch.cuda.synchronize()
    r = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n): f()
        r.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(r)


def main():
    ext = load_kernels()
    for N, L, varlen in ((1, 1, True), (1, 1, False), (64, 1, True), (256, 1, True)):
        inp = (random_inputs(1, 0, 32, 128, seqlens=[L] * N, device='cuda', seed=1) if varlen
               else random_inputs(N, L, 32, 128, device='cuda', seed=1))
        inp['initial_state'] = torch.randn(N, 32, 128, 128, device='cuda')
        out, fs = torch.empty_like(inp['v']), torch.empty_like(inp['initial_state'])
        full = lambda: kda_nb.fwd(**inp, out=out, final_state=fs, backend='cuda')
        raw = lambda: ext.kda_decode(inp['q'], inp['k'], inp['v'], inp['g'], inp['beta'], inp['scale'], out, inp['A_log'],
                                     inp['dt_bias'], inp['lower_bound'], inp['initial_state'], fs, inp['cu_seqlens'], None)
        step = kda_nb.DecodeStep(**inp, out=out, final_state=fs, backend='cuda')
        bare = kda_nb.DecodeStep(**inp, out=out, final_state=fs, backend='cuda', check_values=False)
        print(f"== N={N} L={L} varlen={varlen}")
        print(f"  fwd host/call {per_call_us(full):.1f} us; e2e {e2e_us(full):.1f} us; binding kda_decode host/call "
              f"{per_call_us(raw):.1f} us; binding e2e {e2e_us(raw):.1f}; K3 GPU (graph) {graph_us(raw, n=50, reps=5)[0]:.2f} us")
        print(f"  DecodeStep host/call {per_call_us(step):.1f} us, e2e {e2e_us(step):.1f} us; "
              f"with check_values=False {per_call_us(bare):.1f} us, e2e {e2e_us(bare):.1f} us")
    x = torch.zeros(1, device='cuda')
    print(f"reference: x.add_(1) host/call {per_call_us(lambda: x.add_(1)):.1f} us, e2e {e2e_us(lambda: x.add_(1)):.1f} us; "
          f"synchronize alone {e2e_us(lambda: None):.1f} us")
    print(f"is_current_stream_capturing {per_call_us(torch.cuda.is_current_stream_capturing):.2f} us; "
          f"load_kernels {per_call_us(load_kernels):.2f} us; is_compiling {per_call_us(torch.compiler.is_compiling):.2f} us")
    inp = random_inputs(1, 0, 32, 128, seqlens=[1], device='cuda', seed=1)
    inp['initial_state'] = torch.randn(1, 32, 128, 128, device='cuda')
    a = dict(inp, out=torch.empty_like(inp['v']), final_state=torch.empty_like(inp['initial_state']))
    print(f"_checked_seqlens {per_call_us(lambda: api._checked_seqlens(inp['cu_seqlens'], 1)):.2f} us; "
          f"_kernels_take {per_call_us(lambda: api._kernels_take(inp['q'], inp['v'], inp['initial_state'], a['final_state'])):.2f} us")
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000): kda_nb.fwd(**a, backend='cuda')
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats('tottime').print_stats(18); print(s.getvalue())


if __name__ == '__main__':
    if (why := kernels_unavailable_reason()) is not None: sys.exit(f"host_time: cannot run here: {why}")
    main()
