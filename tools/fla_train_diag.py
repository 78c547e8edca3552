"""Why fla's training step fails in the benchmark's train group: a small fla `chunk_kda` step with every input
requiring grad, called three ways, and whether its output has a grad_fn each time.

    python tools/fla_train_diag.py      # on a GPU, with fla installed (fla compiles its kernels on the first call)
"""
import traceback
import torch
from kda_nb.layout import random_inputs
from kda_nb.peers import fla_forward

LEAVES = ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias', 'initial_state')


def step(inp: dict, label: str):
    "One forward with fresh leaves (dt_bias flat, as fla takes it) and a backward; what it printed."
    leaves = {n: inp[n].clone() for n in LEAVES}
    leaves['dt_bias'] = leaves['dt_bias'].flatten()
    for x in leaves.values(): x.requires_grad_()
    try:
        out, fs = fla_forward(**leaves, scale=inp['scale'], lower_bound=inp['lower_bound'], cu_seqlens=None)
        print(f"{label}: grad enabled {torch.is_grad_enabled()}, inference {torch.is_inference_mode_enabled()}; "
              f"out grad_fn {out.grad_fn}, state grad_fn {fs.grad_fn}", flush=True)
        (out.float().sum() + fs.sum()).backward()
        print(f"{label}: backward ran, |dq| = {leaves['q'].grad.norm():.3g}", flush=True)
    except Exception:
        print(f"{label}: failed"); traceback.print_exc()


inp = random_inputs(1, 256, 2, 128, device='cuda', seed=0, state='fp32', A_log=None)
step(inp, 'plain')                                            # no inference mode anywhere
with torch.inference_mode():
    inner = random_inputs(1, 256, 2, 128, device='cuda', seed=0, state='fp32', A_log=None)
    with torch.inference_mode(False), torch.enable_grad():
        step(inner, 'inference tensors cloned under inference_mode(False)')   # as bench.backends.train_step
        step({n: (x.clone() if torch.is_tensor(x) else x) for n, x in inp.items()}, 'normal tensors, inside the nest')
