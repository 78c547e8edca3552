"""Context parallelism on GPUs: one GPU's `kda` on the whole token axis against `kda_cp` over NCCL.

    torchrun --nproc_per_node=2 tools/cp_bench.py                      # 2 GPUs, NCCL, bf16, D = 128
    torchrun --nproc_per_node=2 tools/cp_bench.py --T 32768 131072 --H 32 64 --out benchmarks/cp_h200.json
    torchrun --nproc_per_node=2 tools/cp_bench.py --device cpu        # gloo, small shapes: a check of this script

For each token count T, head count H and batch (one sequence of T tokens; the anchors' six uneven sequences
scaled to T), every rank builds the same inputs (same seed), then:
- checks: `kda_cp` on its shard against `kda` on the whole axis (outputs all-gathered, and final states:
  relative RMS error, both on the same backend, so only the order of the roundings differs);
- times, median of --reps after --warmup calls, each call between barriers, the slowest rank's time:
  `kda` on the whole axis on one GPU, `kda_cp` forward, and the all-gather of one summary alone (the exchange:
  H * (V*K + K*K) float32 per rank);
- forward + backward of both where the backend has a backward (kda_nb's kernels have none yet: then it
  says why and goes on).
Rank 0 prints a table and writes --out (JSON). NVLink multicast (NVLS) is left off.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--device', choices=('cuda', 'cpu'), default='cuda', help="cuda: NCCL on GPUs; cpu: gloo, a smoke test")
    p.add_argument('--T', type=int, nargs='+', default=None, help='global token counts (default 32768 65536; cpu 256)')
    p.add_argument('--H', type=int, nargs='+', default=None, help='head counts (default 32 64; cpu 2)')
    p.add_argument('--D', type=int, default=None, help='head dimension K = V (default 128; cpu 16)')
    p.add_argument('--backend', default='auto', help="kda_nb backend: auto, cuda or reference")
    p.add_argument('--reps', type=int, default=20)
    p.add_argument('--warmup', type=int, default=3)
    p.add_argument('--no-backward', action='store_true', help='skip forward + backward')
    p.add_argument('--out', default=None, help='JSON file for the results (rank 0)')
    return p.parse_args(argv)


def _guard(args):
    "Why this run cannot go on (None if it can)."
    if 'RANK' not in os.environ or 'WORLD_SIZE' not in os.environ:
        return "start it with torchrun, e.g. torchrun --nproc_per_node=2 tools/cp_bench.py"
    if int(os.environ['WORLD_SIZE']) < 2: return "context parallelism needs at least 2 processes (--nproc_per_node=2)"
    if args.device == 'cuda':
        import torch
        if not torch.cuda.is_available(): return "no CUDA device here (--device cpu runs the smoke test over gloo)"
        if torch.cuda.device_count() < int(os.environ.get('LOCAL_WORLD_SIZE', os.environ['WORLD_SIZE'])):
            return f"{torch.cuda.device_count()} GPU(s) for {os.environ['WORLD_SIZE']} processes: one GPU per process"
    return None


def _commit():
    try: return subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError: return None


def main(argv=None):
    args = parse_args(argv)
    why = _guard(args)
    if why:
        print(f"cp_bench: not run: {why}", file=sys.stderr)
        return 2
    os.environ.setdefault('NCCL_NVLS_ENABLE', '0')                 # NVLink multicast off
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist
    from kda_nb.api import kda
    from kda_nb.cp import kda_cp
    from kda_nb.layout import random_inputs, rel_rms, scaled_six

    all_gather = getattr(dist, 'all_gather_single', None) or dist.all_gather_into_tensor
    cpu = args.device == 'cpu'
    rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    if cpu:
        dev = torch.device('cpu')
        dist.init_process_group('gloo')
    else:
        dev = torch.device('cuda', int(os.environ.get('LOCAL_RANK', rank)))
        torch.cuda.set_device(dev)
        dist.init_process_group('nccl', device_id=dev)
    Ts_list = args.T or ([256] if cpu else [32768, 65536])
    Hs = args.H or ([2] if cpu else [32, 64])
    D = args.D or (16 if cpu else 128)
    dtype = torch.float32 if cpu else torch.bfloat16
    backend = 'reference' if cpu and args.backend == 'auto' else args.backend
    if not cpu:
        from kda_nb.api import kernel_support
        probe = torch.empty(1, 16, 1, D, dtype=dtype, device=dev)
        reason = kernel_support(probe, probe)
        if reason and backend != 'reference':
            if rank == 0: print(f"cp_bench: the kernels cannot run here ({reason}); pass --backend reference to time "
                                f"the reference (slow)", file=sys.stderr)
            dist.destroy_process_group()
            return 2

    def sync():
        if not cpu: torch.cuda.synchronize(dev)

    def timed(fn, reps=args.reps, warmup=args.warmup):
        "Median over reps of the slowest rank's time of `fn()`, ms."
        for _ in range(warmup): fn()
        times = []
        for _ in range(reps):
            sync(); dist.barrier()
            t = time.perf_counter()
            fn()
            sync()
            ms = torch.tensor([(time.perf_counter() - t) * 1e3], dtype=torch.float64, device=dev)
            dist.all_reduce(ms, op=dist.ReduceOp.MAX)
            times.append(float(ms))
        return statistics.median(times)

    rows = []
    for T in Ts_list:
        if T % world: raise SystemExit(f"cp_bench: T = {T} does not split into {world} equal shards")
        Ts = T // world
        lo, hi = rank * Ts, (rank + 1) * Ts
        for H in Hs:
            for batch, seqlens in (('one sequence', [T]), ('six uneven', scaled_six(T))):
                inp = random_inputs(1, 0, H, D, seqlens=seqlens, gate='g=-8', state='fp32', dtype=dtype, device=dev,
                                    seed=T + H)           # (a weak decay: the state handed over matters to the check)
                names = ('q', 'k', 'v', 'g', 'beta')
                full = [inp[n] for n in names] + [inp['A_log'], inp['dt_bias']]
                shard = [inp[n][:, lo:hi].contiguous() for n in names] + [inp['A_log'], inp['dt_bias']]
                kw = dict(initial_state=inp['initial_state'], cu_seqlens=inp['cu_seqlens'], backend=backend)
                row = dict(T=T, H=H, D=D, batch=batch, world=world, dtype=str(dtype)[6:], backend=backend)
                with torch.no_grad():
                    o_full, s_full = kda(*full, **kw)
                    o_cp, s_cp = kda_cp(*shard, cp_group=None, **kw)
                    parts = [torch.empty_like(o_cp) for _ in range(world)]
                    dist.all_gather(parts, o_cp.contiguous())
                    row['err_out'] = rel_rms(torch.cat(parts, 1), o_full)
                    row['err_state'] = rel_rms(s_cp, s_full)
                    row['one_gpu_fwd_ms'] = timed(lambda: kda(*full, **kw))
                    row['cp_fwd_ms'] = timed(lambda: kda_cp(*shard, cp_group=None, **kw))
                    summary = torch.zeros(H * (D * D + D * D), dtype=torch.float32, device=dev)
                    gathered = summary.new_empty(world * summary.numel())
                    row['exchange_ms'] = timed(lambda: all_gather(gathered, summary))
                row['summary_MiB'] = summary.numel() * 4 / 2**20
                row['speedup_fwd'] = row['one_gpu_fwd_ms'] / row['cp_fwd_ms']
                if not args.no_backward:
                    row.update(_backward_times(timed, kda, kda_cp, full, shard, kw))
                rows.append(row)
                if rank == 0: print(json.dumps(row), flush=True)
    if rank == 0:
        _report(rows)
        if args.out:
            env = dict(torch=torch.__version__, python=platform.python_version(), commit=_commit(),
                       device=torch.cuda.get_device_name(dev) if not cpu else platform.processor() or 'cpu')
            Path(args.out).write_text(json.dumps(dict(env=env, rows=rows), indent=1) + '\n')
            print(f"wrote {args.out}")
    dist.destroy_process_group()
    return 0


def _backward_times(timed, kda, kda_cp, full, shard, kw):
    "Forward + backward of one GPU's `kda` and of `kda_cp` (ms), or why the backend cannot."
    import torch

    def run(fn, xs):
        xs = [x.detach().requires_grad_() for x in xs]
        o, s = fn(xs)
        (o.float().square().mean() + s.square().mean()).backward()

    one = lambda: run(lambda xs: kda(*xs, **kw), full)
    cp = lambda: run(lambda xs: kda_cp(*xs, cp_group=None, **kw), shard)
    try:           # first without collectives: a backward that raises on one rank would leave the others waiting
        one()
    except (NotImplementedError, RuntimeError) as e:
        return dict(backward=f"n/a: {str(e).splitlines()[0][:160]}")
    return dict(one_gpu_fwd_bwd_ms=timed(one), cp_fwd_bwd_ms=timed(cp))


def _report(rows):
    print(f"\n| T | H | batch | one device fwd ms | CP fwd ms | speed-up | exchange ms | err out | err state | fwd+bwd ms (1 / CP) |")
    print('|---:|---:|---|---:|---:|---:|---:|---:|---:|---|')
    for r in rows:
        bwd = r.get('backward') or f"{r['one_gpu_fwd_bwd_ms']:.3f} / {r['cp_fwd_bwd_ms']:.3f}"
        print(f"| {r['T']} | {r['H']} | {r['batch']} | {r['one_gpu_fwd_ms']:.3f} | {r['cp_fwd_ms']:.3f} | "
              f"{r['speedup_fwd']:.2f}x | {r['exchange_ms']:.3f} | {r['err_out']:.1e} | {r['err_state']:.1e} | {bwd} |")


if __name__ == '__main__':
    sys.exit(main())
