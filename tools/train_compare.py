"""Training-path comparison on one GPU, kda_nb and fla's own chunk_kda (FLA_FLASH_KDA=0) timed in the same process on
the same tensors: forward without grad, forward + backward (upstream gradients for out and the final state), the
extra peak memory of forward + backward, and every gradient's error against autograd through the fp64 recurrence.

    python tools/train_compare.py [--impls kda_nb,fla] [--cases h64,h96,six64,even64,long32] [--out DIR]

Prints a table; writes train_compare.json to --out (default $OUT or /tmp). fla's first call per shape compiles
and autotunes its Triton backward (minutes on a fresh machine): its first-call time is recorded too."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault('FLA_FLASH_KDA', '0')
import torch

from kda_nb import kda
from kda_nb.backward import recurrent_vjp
from kda_nb.bench import time_calls
from kda_nb.layout import random_inputs, rel_rms, scaled_six

NAMES = ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias', 'initial_state')
GRADS = ('dq', 'dk', 'dv', 'dg', 'dbeta', 'dA_log', 'ddt_bias', 'dinitial_state')
CASES = {'h64': dict(B=1, T=8192, H=64), 'h96': dict(B=1, T=8192, H=96),
         'six64': dict(B=1, T=0, H=64, seqlens=scaled_six()), 'even64': dict(B=8, T=1024, H=64),
         'long32': dict(B=1, T=32768, H=32)}


def kda_nb_call(x, cu):
    return kda(*(x[n] for n in NAMES[:7]), scale=x['scale'], initial_state=x['initial_state'], cu_seqlens=cu)


def fla_call(x, cu):
    from fla.ops.kda import chunk_kda
    return chunk_kda(x['q'], x['k'], x['v'], x['g'], x['beta'], scale=x['scale'], initial_state=x['initial_state'],
                     output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                     use_beta_sigmoid_in_kernel=True, safe_gate=True, lower_bound=-5.0, A_log=x['A_log'],
                     dt_bias=x['dt_bias'], state_v_first=True, cu_seqlens=cu)


IMPLS = {'kda_nb': kda_nb_call, 'fla': fla_call}


def leaves(inp, impl):
    "Fresh leaf tensors requiring grad, and the rest of the problem (fla takes dt_bias flat, [H * K])."
    x = {n: inp[n].detach().clone() for n in NAMES}
    if impl == 'fla': x['dt_bias'] = x['dt_bias'].flatten()
    for n in NAMES: x[n].requires_grad_()
    x['scale'] = inp['scale']
    return x


def step(call, x, cu, do, dfs):
    out, fs = call(x, cu)
    torch.autograd.backward([out, fs], [do, dfs])
    return out


def measure(impl, case, calls):
    spec = CASES[case]
    inp = random_inputs(**spec, K=128, device='cuda', seed=0, state='fp32')
    cu = inp['cu_seqlens']
    call = IMPLS[impl]
    x = leaves(inp, impl)
    torch.manual_seed(1)
    do = torch.randn_like(inp['v'])
    dfs = torch.randn_like(inp['initial_state'])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step(call, x, cu, do, dfs)                                  # first call: builds, compiles, autotunes
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    with torch.no_grad():
        fwd_ms = statistics.median(time_calls([lambda: call(x, cu)], 'cuda', warmup=3, max_calls=calls, min_calls=calls))
    def train():
        for n in NAMES: x[n].grad = None
        step(call, x, cu, do, dfs)
    train_ms = statistics.median(time_calls([train], 'cuda', warmup=2, max_calls=calls, min_calls=calls))
    for n in NAMES: x[n].grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step(call, x, cu, do, dfs)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    return dict(impl=impl, case=case, forward_ms=fwd_ms, train_ms=train_ms, extra_peak_gb=extra / 1e9,
                first_call_s=first_s)


def errors(impl, seqlens=(300, 724), H=2):
    "Each gradient's rel. RMS error against autograd through the fp64 recurrence, and out's and the final state's."
    inp = random_inputs(1, 0, H, 128, seqlens=list(seqlens), device='cuda', seed=7, state='fp32')
    cu = inp['cu_seqlens']
    x = leaves(inp, impl)
    torch.manual_seed(2)
    do = torch.randn_like(inp['v'], dtype=torch.float32)
    dfs = torch.randn_like(inp['initial_state'])
    out, fs = IMPLS[impl](x, cu)
    torch.autograd.backward([out, fs], [do.to(out.dtype), dfs])
    want = recurrent_vjp(*(inp[n] for n in NAMES[:7]), scale=inp['scale'], initial_state=inp['initial_state'],
                         cu_seqlens=cu, grad_out=do, grad_state=dfs)
    from kda_nb.recurrence import kda_recurrent
    o64, s64 = kda_recurrent(*(inp[n] for n in NAMES[:7]), scale=inp['scale'], initial_state=inp['initial_state'],
                             cu_seqlens=cu, dtype=torch.float64)
    e = dict(impl=impl, out=rel_rms(out.detach(), o64), final_state=rel_rms(fs.detach(), s64))
    for name, n, w in zip(GRADS, NAMES, want): e[name] = rel_rms(x[n].grad.view(inp[n].shape), w)
    return e


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--impls', default='kda_nb,fla')
    ap.add_argument('--cases', default='h64')
    ap.add_argument('--calls', type=int, default=10)
    ap.add_argument('--out', default=os.environ.get('OUT', '/tmp'))
    a = ap.parse_args(argv)
    impls, cases = a.impls.split(','), a.cases.split(',')
    rows, errs = [], []
    for impl in impls:
        errs.append(errors(impl))
        print(' '.join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in errs[-1].items()), flush=True)
    for case in cases:
        for impl in impls:
            rows.append(measure(impl, case, a.calls))
            r = rows[-1]
            print(f"{case:7s} {impl:7s} forward {r['forward_ms']:7.3f} ms  forward+backward {r['train_ms']:7.3f} ms  "
                  f"extra peak {r['extra_peak_gb']:5.2f} GB  first call {r['first_call_s']:6.1f} s", flush=True)
    dev = torch.cuda.get_device_name()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / 'train_compare.json').write_text(json.dumps(dict(device=dev, torch=torch.__version__,
                                                                    rows=rows, errors=errs), indent=1))
    print(f"\n{dev}, torch {torch.__version__}")
    print("| case | impl | forward ms | forward+backward ms | extra peak GB |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['impl']} | {r['forward_ms']:.3f} | {r['train_ms']:.3f} | {r['extra_peak_gb']:.2f} |")
    return 0


if __name__ == '__main__':
    sys.exit(main())
