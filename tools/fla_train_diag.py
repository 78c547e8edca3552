"""Why fla's training step fails in the benchmark's train group: a small fla `chunk_kda` step with every input
requiring grad, called three ways, and whether its output has a grad_fn each time; also which of fla's backends
could take the call, and what fla's undispatched entry point gives.

    python tools/fla_train_diag.py      # on a GPU, with fla installed (fla compiles its kernels on the first call)
"""
import inspect
import logging
import os
import traceback
import torch

os.environ.setdefault('FLA_FLASH_KDA', '0')
logging.basicConfig(level=logging.INFO)
from kda_nb.layout import random_inputs
from kda_nb.peers import fla_forward

LEAVES = ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias', 'initial_state')


def step(inp: dict, label: str, forward=fla_forward):
    "One forward with fresh leaves (dt_bias flat, as fla takes it) and a backward; what it printed."
    leaves = {n: inp[n].clone() for n in LEAVES}
    leaves['dt_bias'] = leaves['dt_bias'].flatten()
    for x in leaves.values(): x.requires_grad_()
    try:
        out, fs = forward(**leaves, scale=inp['scale'], lower_bound=inp['lower_bound'], cu_seqlens=None)
        print(f"{label}: grad enabled {torch.is_grad_enabled()}, inference {torch.is_inference_mode_enabled()}; "
              f"out grad_fn {out.grad_fn}, state grad_fn {fs.grad_fn}, out is inference {out.is_inference()}, "
              f"out requires grad {out.requires_grad}", flush=True)
        (out.float().sum() + fs.sum()).backward()
        print(f"{label}: backward ran, |dq| = {leaves['q'].grad.norm():.3g}", flush=True)
    except Exception:
        print(f"{label}: failed", flush=True); traceback.print_exc()


def undispatched(q, k, v, g, beta, scale, A_log, dt_bias, lower_bound, initial_state=None, cu_seqlens=None):
    "fla's chunk_kda with its backend dispatch unwrapped: fla's own Triton path, nothing else."
    from fla.ops.kda import chunk_kda
    f = inspect.unwrap(chunk_kda)
    return f(q, k, v, g, beta, scale=scale, initial_state=initial_state.float(), output_final_state=True,
             use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
             safe_gate=True, lower_bound=lower_bound, A_log=A_log, dt_bias=dt_bias, state_v_first=True,
             cu_seqlens=cu_seqlens)


print(f"torch {torch.__version__}, FLA_FLASH_KDA={os.environ.get('FLA_FLASH_KDA')}", flush=True)
try:
    import fla, fla.backends as fb
    from fla.ops.kda import chunk_kda
    print(f"fla {getattr(fla, '__version__', '?')}; chunk_kda wrapped: {chunk_kda is not inspect.unwrap(chunk_kda)}")
    reg = fb._function_registries.get(inspect.unwrap(chunk_kda))
    for b in (reg._get_sorted_backends() if reg else []):
        print(f"  backend {b.backend_type}: available {b.is_available()}, enabled {b.is_enabled()}", flush=True)
except Exception:
    traceback.print_exc()

inp = random_inputs(1, 256, 2, 128, device='cuda', seed=0, state='fp32', A_log=None)
step(inp, 'plain')                                            # no inference mode anywhere
step(inp, 'plain, undispatched', undispatched)
with torch.inference_mode():
    inner = random_inputs(1, 256, 2, 128, device='cuda', seed=0, state='fp32', A_log=None)
    with torch.inference_mode(False), torch.enable_grad():
        step(inner, 'inference tensors cloned under inference_mode(False)')   # as bench.backends.train_step
        step({n: (x.clone() if torch.is_tensor(x) else x) for n, x in inp.items()}, 'normal tensors, inside the nest')
        step({n: (x.clone() if torch.is_tensor(x) else x) for n, x in inp.items()}, 'normal tensors, nest, undispatched',
             undispatched)
