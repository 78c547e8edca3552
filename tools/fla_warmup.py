"""Compile and autotune fla's training path (chunk_kda forward + backward) on the shapes a later run will time:
the benchmark's train group, its gradient check and the small language model of kda_nb.train_lm. Triton keeps
both the compiled kernels and the autotuning results on disk, so the run that times fla afterwards starts warm
(its own first calls and warm-up calls still come before any timing). On the H200 the first shape took 271 s.

    python tools/fla_warmup.py [--H 64] [--first N] [--deadline S] [--unpack F] [--pack F]

--first N warms only the first N shapes (one device command holds about two); --deadline S starts no shape after
S seconds (the rest is named, for a later command); --pack F writes Triton's cache
(TRITON_CACHE_DIR, else ~/.triton/cache) to the tar.gz F afterwards, and --unpack F restores one before, so that a
later machine of the same kind (same triton, same driver) starts warm. The tarball holds kernels compiled from
fla's code: carry it to the device (e.g. as .triton_cache.tgz, which git ignores), never commit it.
"""
import argparse, os, tarfile, time
from pathlib import Path
os.environ.setdefault('FLA_FLASH_KDA', '0')


def cache_dir() -> Path:
    "Triton's on-disk cache, where it keeps compiled kernels and autotuning results."
    return Path(os.environ.get('TRITON_CACHE_DIR') or Path.home() / '.triton' / 'cache')


def pack(tarball: str) -> int:
    "Triton's cache as a tar.gz; its size in bytes."
    with tarfile.open(tarball, 'w:gz') as tf: tf.add(cache_dir(), arcname='cache')
    return Path(tarball).stat().st_size


def unpack(tarball: str) -> int:
    "A packed cache back into Triton's cache folder; the number of files."
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith('cache/') and '..' not in Path(m.name).parts]
        for m in members: m.name = m.name[len('cache/'):]
        tf.extractall(root, members=[m for m in members if m.name])
    return sum(m.isfile() for m in members)


def shapes(H: int):
    "What a later run times: the train group's cases, then the gradient check's and train_lm's varlen problems."
    from kda_nb.bench.cases import train_cases
    from kda_nb.bench.check import GRAD_CHECK_SEQLENS
    return [('case', c) for c in train_cases(Hs=(H,))] + [('varlen', (list(GRAD_CHECK_SEQLENS), 2)), ('varlen', ([512] * 8, 4))]


def warm(kind, what):
    "One fla training step (forward and backward) on one shape, twice."
    import torch
    from kda_nb.bench.backends import train_step
    from kda_nb.bench.cases import make_inputs
    from kda_nb.layout import random_inputs
    from kda_nb.peers import fla_forward
    if kind == 'case':
        call = train_step(lambda **x: fla_forward(**x), make_inputs(what, 'cuda', 0), what, flat_dt_bias=True)
        call(); call(); torch.cuda.synchronize()
        return f"fla {what.name}, H = {what.H}, T = {sum(what.seqlens)}"
    lens, H = what
    inp = random_inputs(1, 0, H, 128, seqlens=lens, seed=0, device='cuda', state='fp32', A_log=None)
    leaves = {n: inp[n].clone().requires_grad_() for n in ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias', 'initial_state')}
    leaves['dt_bias'] = leaves['dt_bias'].detach().flatten().requires_grad_()
    out, fs = fla_forward(**leaves, scale=inp['scale'], lower_bound=inp['lower_bound'], cu_seqlens=inp['cu_seqlens'])
    (out.float().sum() + fs.sum()).backward(); torch.cuda.synchronize()
    return f"fla varlen {lens[:3]}..., H = {H}"


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--H', type=int, default=64)
    ap.add_argument('--first', type=int, default=None, help='warm only the first N shapes')
    ap.add_argument('--deadline', type=float, default=None, help='start no new shape after this many seconds')
    ap.add_argument('--unpack', default=None, help="a packed Triton cache to restore first")
    ap.add_argument('--pack', default=None, help="write Triton's cache to this tar.gz afterwards")
    a = ap.parse_args()
    if a.unpack: print(f"restored {unpack(a.unpack)} files into {cache_dir()}", flush=True)
    t0 = time.time()
    todo = shapes(a.H)[:a.first]
    for n, (kind, what) in enumerate(todo):
        if a.deadline is not None and time.time() - t0 > a.deadline:
            print(f"deadline of {a.deadline:.0f} s passed: left for a later command: {[w for _, w in todo[n:]]}", flush=True)
            break
        t = time.time()
        label = warm(kind, what)
        print(f"{label}: {time.time() - t:.0f} s", flush=True)
    if a.pack: print(f"packed {cache_dir()} into {a.pack}: {pack(a.pack) / 1e6:.1f} MB", flush=True)
