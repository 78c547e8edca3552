"""Time K3 (decode) of this tree against K3 of an earlier commit, in one process, on the same inputs.

    python tools/k3_before_after.py [commit]     # commit: 9cf5fb7 (K3 with one slice per block) by default

Both kernels are built here (the earlier one from git history, as kda_nb_v3 is) and called through their
bindings. GPU time per call: 20 calls captured in a CUDA graph over 4 input sets, replayed 7 times, the
median; the better of two rounds each. Prints a markdown table (benchmarks/k3_slices_h200.md holds the
H200's) and whether the two kernels' outputs and states are bitwise equal.
"""
import statistics
import sys

import torch

from kda_nb import kernels
from kda_nb.bench import copy_bandwidth, time_e2e
from kda_nb.decode import state_traffic_bytes
from kda_nb.layout import random_inputs

CASES = ((1, 1, torch.float32), (8, 1, torch.float32), (16, 1, torch.float32), (32, 1, torch.float32),
         (64, 1, torch.float32), (128, 1, torch.float32), (256, 1, torch.float32), (1024, 1, torch.float32),
         (256, 1, torch.bfloat16), (1024, 1, torch.bfloat16), (64, 4, torch.float32), (64, 8, torch.float32),
         (256, 2, torch.float32), (16, 16, torch.float32))     # (sequences, tokens each, state dtype), H = 32


def graph_us(f, n: int = 20, reps: int = 7):
    "GPU time of one `f()`: `n` calls captured in a CUDA graph, replayed `reps` times; the median. And the graph."
    f(); torch.cuda.synchronize()
    with torch.cuda.stream(torch.cuda.Stream()):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n): f()
    torch.cuda.synchronize()
    g.replay(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        a.record(); g.replay(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / n)
    return statistics.median(ts), g


def e2e_us(f, n: int = 300) -> float:
    "Median µs of `f()` followed by `torch.cuda.synchronize()` (the benchmark's `time_e2e`, without its time budget)."
    return statistics.median(time_e2e([f], 'cuda', warmup=30, n=n, budget_s=float('inf'))) * 1e3


def main(commit: str):
    kernels.KERNEL_VERSIONS['k3_before'] = commit
    new, old = kernels.load_kernels(), kernels.load_kernels(version='k3_before')
    rate = copy_bandwidth('cuda')
    print(f"copy rate {rate / 1e12:.2f} TB/s; before: K3 of {commit}, after: this tree")
    print("| N | L | state | floor us | before us | after us | after/floor | before/after | same bits |")
    for N, L, sd in CASES:
        sets = []
        for r in range(4):   # a pass over the sets is past the L2 for the large cases
            inp = random_inputs(1, 0, 32, 128, seqlens=[L] * N, device='cuda', seed=r)
            inp['initial_state'] = torch.randn(N, 32, 128, 128, device='cuda').to(sd)
            sets.append(inp)
        us, first = {}, {}
        for name, ext in (('before', old), ('after', new), ('before', old), ('after', new)):
            bufs = [(torch.empty_like(i['v']), torch.empty_like(i['initial_state'])) for i in sets]
            def f(ext=ext, bufs=bufs):
                for i, (o, fs) in zip(sets, bufs):
                    ext.kda_decode(i['q'], i['k'], i['v'], i['g'], i['beta'], i['scale'], o, i['A_log'], i['dt_bias'],
                                   i['lower_bound'], i['initial_state'], fs, i['cu_seqlens'], None)
            t, _ = graph_us(f)
            us[name] = min(us.get(name, float('inf')), t / len(sets))
            first.setdefault(name, bufs[0])
        same = all(torch.equal(x, y) for x, y in zip(first['before'], first['after']))
        floor = state_traffic_bytes(N, 32, state_bytes=2 if sd == torch.bfloat16 else 4) / rate * 1e6
        print(f"| {N} | {L} | {str(sd)[6:]} | {floor:.1f} | {us['before']:.1f} | {us['after']:.1f} | "
              f"{us['after'] / floor:.2f}x | {us['before'] / us['after']:.3f} | {same} |")
    # one decode step of one sequence, end to end: eager, and replayed as a CUDA graph
    import kda_nb
    inp = random_inputs(1, 0, 32, 128, seqlens=[1], device='cuda', seed=9)
    inp['initial_state'] = torch.randn(1, 32, 128, 128, device='cuda')
    a = dict(inp, out=torch.empty_like(inp['v']), final_state=torch.empty_like(inp['initial_state']))
    step = lambda: kda_nb.fwd(**a, backend='cuda')
    _, g = graph_us(step, n=1)
    print(f"1 sequence x 1 token, H = 32, fp32 state: fwd eager e2e {e2e_us(step):.1f} us; as a CUDA graph "
          f"(replay + sync) {e2e_us(g.replay):.1f} us; an empty synchronize {e2e_us(lambda: None):.1f} us")


if __name__ == '__main__':
    if (why := kernels.kernels_unavailable_reason()) is not None: sys.exit(f"k3_before_after: cannot run here: {why}")
    main(sys.argv[1] if len(sys.argv) > 1 else '9cf5fb7caf1b516afe40289cd1134c4df45accfa')
