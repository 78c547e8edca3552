"""Why fla's training step fails in the benchmark's train group: one small step through the same harness, printed."""
import traceback
import torch
from kda_nb.bench.backends import fla_backend
from kda_nb.bench.cases import Case, TRAIN
from kda_nb.layout import random_inputs
from kda_nb.peers import fla_forward

bk = fla_backend()
with torch.inference_mode():
    inp = random_inputs(1, 256, 2, 128, device='cuda', seed=0, state='fp32', A_log=None)
    call = bk.bind(inp, Case(TRAIN, 'diag', 2, [256], 'fp32', False, 128, 128))
    with torch.inference_mode(False), torch.enable_grad():
        out, fs = fla_forward(**call.leaves, scale=inp['scale'], lower_bound=inp['lower_bound'], cu_seqlens=None)
        print('out', out.requires_grad, out.grad_fn, 'state', fs.requires_grad, fs.grad_fn, type(out))
        print({n: (x.requires_grad, x.is_inference(), x.is_leaf, tuple(x.shape)) for n, x in call.leaves.items()})
    try:
        call(); print('call ok')
    except Exception:
        traceback.print_exc()
