"""Compile and autotune fla's training path (chunk_kda forward + backward) on the shapes a later run will time:
the benchmark's train group, its gradient check and the small language model of kda_nb.train_lm. Triton keeps
both the compiled kernels and the autotuning results on disk, so the run that times fla afterwards starts warm
(its own first calls and warm-up calls still come before any timing).

    python tools/fla_warmup.py [--H 64]      # on a GPU with fla installed; prints each shape's seconds
"""
import argparse, os, time
os.environ.setdefault('FLA_FLASH_KDA', '0')
import torch
from kda_nb.bench.backends import train_step
from kda_nb.bench.cases import make_inputs, train_cases
from kda_nb.bench.check import GRAD_CHECK_SEQLENS
from kda_nb.layout import random_inputs
from kda_nb.peers import fla_forward

ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
ap.add_argument('--H', type=int, default=64)
a = ap.parse_args()
fla = lambda **x: fla_forward(**x)
for case in train_cases(Hs=(a.H,)):
    t = time.time()
    call = train_step(fla, make_inputs(case, 'cuda', 0), case, flat_dt_bias=True)
    call(); call(); torch.cuda.synchronize()
    print(f"fla {case.name}, H = {case.H}, T = {sum(case.seqlens)}: {time.time() - t:.0f} s", flush=True)
    del call; torch.cuda.empty_cache()
for lens, H in ((list(GRAD_CHECK_SEQLENS), 2), ([512] * 8, 4)):       # the gradient check; train_lm's layers
    t = time.time()
    inp = random_inputs(1, 0, H, 128, seqlens=lens, seed=0, device='cuda', state='fp32', A_log=None)
    leaves = {n: inp[n].clone().requires_grad_() for n in ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias', 'initial_state')}
    leaves['dt_bias'] = leaves['dt_bias'].detach().flatten().requires_grad_()
    out, fs = fla_forward(**leaves, scale=inp['scale'], lower_bound=inp['lower_bound'], cu_seqlens=inp['cu_seqlens'])
    (out.float().sum() + fs.sum()).backward(); torch.cuda.synchronize()
    print(f"fla varlen {lens[:3]}..., H = {H}: {time.time() - t:.0f} s", flush=True)
