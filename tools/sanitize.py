"""The kernels under compute-sanitizer: the small cases, the harness, and the racecheck report's parser.

A lab harness beside the library (the kernels notebook's *Memory and race checks* runs it on the H200):

    python tools/sanitize.py            # memcheck, then racecheck; exit 1 if memcheck finds an error
    python tools/sanitize.py --backward # the backward's cases only

`SANITIZE_CASE` is a script run in a child process under `compute-sanitizer --tool <tool>`: fixed and
variable-length batches in every state format, `cu_seqlens` that no check has seen, a state pool with a
padding sequence and an index outside the pool, misaligned views, the pipeline (`steps=3`) and the fused
kernel (`path='fused'`), K3 with adversarial offsets and adversarial per-token store tables (with and without eager loads; two and four rows a thread; one block a head), K3 reading a replay in place from adversarial tables, K2 and the fused kernel with adversarial checkpoint tables, a prepared decode step fed unchecked values, head dims below 128 (K1 + K2 and K3 on
tensors at their own K, V: pools, states, checkpoints, adversarial offsets), the chain of entry states
(kda_entry_scan) on adversarial grids, K2's states only, and the backward's two passes
(`kda_backward_cuda`) on fixed, varlen and adversarial batches, bf16 and fp16 inputs.
"""
import os
import re
import shutil
import subprocess
import sys

from kda_nb.kernels import load_kernels

SANITIZE_CASE = '''
import torch
from kda_nb.layout import random_inputs
from kda_nb.plan import run_kernels, fwd_cuda
for seqlens, B, T in ((None, 2, 40), ([5, 17, 0, 33], 1, 0)):
    for state_in, state_out in (('bf16', 'fp32'), ('fp32', 'bf16'), (None, None)):
        inp = random_inputs(B, T, 2, 128, seqlens=seqlens, state=state_in, device='cuda', seed=1)
        o, s = run_kernels(inp, state_out)
        torch.cuda.synchronize()
        assert torch.isfinite(o).all()
# cu_seqlens that no check has seen: past T, decreasing, negative, huge (each tensor its own allocation)
for cu in ([0, 19, 60], [0, 30, 10, 40], [-5, 10, 40], [0, 10, 2**62], [40, 0, 40], [7, 9, 33]):
    inp = random_inputs(1, 40, 2, 128, device='cuda', seed=2)
    inp['cu_seqlens'] = torch.tensor(cu, device='cuda')
    inp['initial_state'] = torch.randn(len(cu) - 1, 2, 128, 128, device='cuda')
    o, s = run_kernels(inp)
    torch.cuda.synchronize()
    assert torch.isfinite(o).all()
# a state pool updated in place, with a padding sequence and an index outside the pool (unchecked)
inp = random_inputs(1, 0, 2, 128, seqlens=[5, 17, 9, 30], device='cuda', seed=4)
pool = torch.randn(3, 2, 128, 128, device='cuda')
out = torch.empty_like(inp['v'])
fwd_cuda(**{k: x for k, x in inp.items() if k != 'initial_state'}, out=out, initial_state=pool, final_state=pool,
         state_indices=torch.tensor([2, -1, 99, 0], device='cuda'))
torch.cuda.synchronize()
assert torch.isfinite(out).all() and (out[:, 5:31] == 0).all()
# a misaligned view of dt_bias and of q
inp = random_inputs(1, 33, 2, 128, device='cuda', seed=3)
for name in ('dt_bias', 'q'):
    x = inp[name]
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device='cuda')
    flat[1:] = x.reshape(-1)
    inp[name] = flat[1:].view(x.shape)
run_kernels(inp)
torch.cuda.synchronize()
# the pipeline (K1 and K2 in steps, K2 on a second stream) and the fused kernel (v5), each named by its path:
# fixed and varlen, empty sequences (on step boundaries), adversarial offsets, a pool with padding
for path, steps, seed in (('chunked', 3, 7), ('fused', 1, 10)):
    for seqlens, B, T in ((None, 2, 100), ([0, 33, 0, 16, 0, 7, 0], 1, 0)):
        o, s = run_kernels(random_inputs(B, T, 2, 128, seqlens=seqlens, device='cuda', seed=seed), path=path, steps=steps)
        torch.cuda.synchronize()
        assert torch.isfinite(o).all()
    for cu in ([0, 19, 60], [-5, 10, 40], [0, 10, 2**62], [40, 0, 40]):
        inp = random_inputs(1, 40, 2, 128, device='cuda', seed=seed + 1)
        inp['cu_seqlens'] = torch.tensor(cu, device='cuda')
        inp['initial_state'] = torch.randn(len(cu) - 1, 2, 128, 128, device='cuda')
        o, s = run_kernels(inp, path=path, steps=steps)
        torch.cuda.synchronize()
    inp = random_inputs(1, 0, 2, 128, seqlens=[50, 17, 9, 30], device='cuda', seed=seed + 2)
    pool = torch.randn(3, 2, 128, 128, device='cuda')
    fwd_cuda(**{k: x for k, x in inp.items() if k != 'initial_state'}, out=torch.empty_like(inp['v']),
             initial_state=pool, final_state=pool, state_indices=torch.tensor([2, -1, 99, 0], device='cuda'),
             path=path, steps=steps)
    torch.cuda.synchronize()
# K3 (decode, 04a_decode): adversarial offsets with a bf16 pool, an int32 padding index and one outside the pool
from kda_nb.decode import decode_cuda
for cu in ([0, 1, 2, 3], [0, 19, 60], [0, 30, 10, 40], [-5, 10, 40], [0, 10, 2**62], [40, 0, 40]):
    inp = random_inputs(1, 40, 2, 128, device='cuda', seed=5)
    inp['cu_seqlens'] = torch.tensor(cu, device='cuda')
    pool = torch.randn(3, 2, 128, 128, device='cuda').bfloat16()
    idx = torch.tensor([2, -1, 7][:len(cu) - 1], device='cuda', dtype=torch.int32)
    out = torch.empty_like(inp['v'])
    decode_cuda(**{k: x for k, x in inp.items() if k != 'initial_state'}, out=out, initial_state=pool, final_state=pool,
                state_indices=idx)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
inp = random_inputs(3, 2, 2, 128, device='cuda', seed=6)          # fixed length, fp32 states in and out
decode_cuda(**{k: x for k, x in inp.items() if k != 'initial_state'}, out=torch.empty_like(inp['v']),
            initial_state=inp['initial_state'], final_state=torch.empty_like(inp['initial_state']))
torch.cuda.synchronize()
# K3's per-token stores (04a_decode): tables no check has seen (negative, past the pool, the integer type's extremes,
# valid slots past a sequence's tokens and for padding sequences), into a bf16 pool in place, no final write
for idx_dtype in (torch.int32, torch.int64):
    inp = random_inputs(1, 0, 2, 128, seqlens=[3, 8, 1, 19], state=None, device='cuda', seed=12)
    pool = torch.randn(4, 2, 128, 128, device='cuda').bfloat16()
    info = torch.iinfo(idx_dtype)
    bad = torch.tensor([-1, -2, 4, 5, info.max, info.min, info.max // 2 + 1, -(2 ** 30)])
    ts = bad[torch.arange(4 * 64) % len(bad)].view(4, 64)
    ts[0, 1], ts[0, 3:], ts[1:3] = 2, 3, 3
    decode_cuda(**{k: x for k, x in inp.items() if k != 'initial_state'}, out=torch.empty_like(inp['v']),
                initial_state=pool, final_state=pool, state_indices=torch.tensor([0, -1, 99, 1], device='cuda', dtype=idx_dtype),
                token_slots=ts.to('cuda', idx_dtype), write_final=False)
    torch.cuda.synchronize()
# K3 with eager loads and without (04a_decode, *Eager loads*; kda_nb.plan.K3_EAGER_LOADS, on: the cases above run
# with them), and with eager loads four rows a thread (*Four rows a thread*, K3_FOUR_ROWS): through padding slots, slots
# outside the pool, empty sequences, sequences longer than a tile, adversarial offsets and per-token store tables no
# check has seen
import kda_nb.plan as plan_switches
was, was_four, N = plan_switches.K3_EAGER_LOADS, plan_switches.K3_FOUR_ROWS, 200
was_min, plan_switches.K3_FOUR_ROWS_MIN_TOKENS = plan_switches.K3_FOUR_ROWS_MIN_TOKENS, 1   # (four rows: every call)
try:
    for eager, four in ((True, False), (False, False), (True, True)):
        plan_switches.K3_EAGER_LOADS, plan_switches.K3_FOUR_ROWS = eager, four
        for cu_tail, idx_dtype in (([], torch.int64), ([-5, 2 ** 40], torch.int32)):
            inp = random_inputs(1, 0, 8, 128, seqlens=[1, 0, 3, 9] * (N // 4), state=None, device='cuda', seed=13)
            cu = inp['cu_seqlens'].clone()
            if cu_tail: cu[-3:-1] = torch.tensor(cu_tail, device='cuda')
            pool = torch.randn(N + 4, 8, 128, 128, device='cuda').bfloat16()
            idx = torch.randperm(N, device='cuda')
            idx[::9], idx[5::11] = -1, N + 7                            # padding, and slots outside the pool
            ts = torch.full((N, 3), -1, dtype=torch.long)
            ts[::5, 0], ts[1::5, 2], ts[2::5, 1] = N, N + 1, 2 ** 40    # stores into spare slots, one outside the pool
            x = {k: t for k, t in inp.items() if k not in ('initial_state', 'cu_seqlens')}
            decode_cuda(**x, cu_seqlens=cu, out=torch.empty_like(inp['v']), initial_state=pool, final_state=pool,
                        state_indices=idx.to(idx_dtype))
            decode_cuda(**x, cu_seqlens=cu, out=torch.empty_like(inp['v']), initial_state=pool, final_state=pool,
                        state_indices=idx.to(idx_dtype), token_slots=ts.to('cuda', idx_dtype), write_final=False)
            torch.cuda.synchronize()
finally:
    plan_switches.K3_EAGER_LOADS, plan_switches.K3_FOUR_ROWS, plan_switches.K3_FOUR_ROWS_MIN_TOKENS = was, was_four, was_min
# K3 one block a head (04a_decode, *One block a head*; a plan's k3_wide): the same adversarial offsets, padding slots and
# slots outside the pool, a bf16 pool and no state in
from kda_nb.kernels import launch as launch_kernels
from kda_nb.plan import decode_plan
for cu_tail in ([], [-5, 2 ** 40]):
    inp = random_inputs(1, 0, 8, 128, seqlens=[1, 0, 3, 9] * (N // 4), state=None, device='cuda', seed=15)
    cu = inp['cu_seqlens'].clone()
    if cu_tail: cu[-3:-1] = torch.tensor(cu_tail, device='cuda')
    pool = torch.randn(N + 4, 8, 128, 128, device='cuda').bfloat16()
    idx = torch.randperm(N, device='cuda')
    idx[::9], idx[5::11] = -1, N + 7
    for s_in, slots in ((pool, idx), (None, None)):
        fs = pool if s_in is not None else torch.empty(N, 8, 128, 128, device='cuda')
        launch_kernels(decode_plan('sanitizer', True, False, wide=True), inp['q'], inp['k'], inp['v'], inp['g'], inp['beta'],
                       inp['scale'], torch.empty_like(inp['v']), inp['A_log'], inp['dt_bias'], inp['lower_bound'], s_in, fs,
                       cu, slots)
        torch.cuda.synchronize()
# K3 reading a replay in place (04a_decode, *Replay read in place*): replay tables no check has seen (counts negative,
# past the records and past the sequence; batch rows negative and past the batch), adversarial offsets, padding slots
# and slots outside the pool; two rows a thread and four (K3_FOUR_ROWS)
N, D = 64, 4
inp = random_inputs(1, 0, 4, 128, seqlens=[3, 0, 5, 1] * (N // 4), state=None, device='cuda', seed=14)
x = {k: t for k, t in inp.items() if k not in ('initial_state', 'cu_seqlens')}
pool = torch.randn(N + 2, 4, 128, 128, device='cuda')
rec = [torch.randn(N + 2, D, *t.shape[2:], device='cuda').to(t.dtype).flatten(0, 1) for t in (x['k'], x['v'], x['g'])]
rec.insert(3, torch.randn((N + 2) * D, 4, device='cuda').to(x['beta'].dtype))
idx = torch.randperm(N, device='cuda')
idx[::7], idx[3::11] = -1, N + 5
table = torch.stack([torch.tensor([2, -3, 9, 2 ** 40] * (N // 4)), torch.tensor([0, -50, 10 ** 6, 2 ** 50] * (N // 4))])
table[1, ::5] = torch.arange(0, N, 5) * 2
cu = inp['cu_seqlens'].clone()
cu[-3:-1] = torch.tensor([-5, 2 ** 40], device='cuda')
ts = torch.full((N, D), -1, dtype=torch.long)
ts[::3, 1], ts[1::3, 0] = N, N + 1
for four in (False, True):
    plan_switches.K3_FOUR_ROWS, plan_switches.K3_FOUR_ROWS_MIN_TOKENS = four, 1
    try:
        decode_cuda(**x, cu_seqlens=cu, out=torch.zeros_like(inp['v']), initial_state=pool, final_state=pool, state_indices=idx,
                    token_slots=ts.cuda(), write_final=False, replay=rec + [table.cuda().contiguous()])
        torch.cuda.synchronize()
    finally: plan_switches.K3_FOUR_ROWS, plan_switches.K3_FOUR_ROWS_MIN_TOKENS = was_four, was_min
# a prepared decode step (kda_nb.DecodeStep): unchecked values written into its buffers between calls
from kda_nb.api import DecodeStep
bufs = random_inputs(1, 40, 2, 128, seqlens=[5, 30, 5], state=None, device='cuda', seed=3)
pool, idx = torch.randn(4, 2, 128, 128, device='cuda'), torch.tensor([0, 3, 1], device='cuda')
step = DecodeStep(**bufs | dict(initial_state=pool), out=torch.empty_like(bufs['v']), final_state=pool,
                  state_indices=idx, check_values=False)
for cu, slots in (([0, 19, 60, 2**40], [7, -5, 2]), ([-5, 10, 3, 40], [3, 3, -1]), ([40, 0, 40, 41], [2**30, 0, 1])):
    bufs['cu_seqlens'].copy_(torch.tensor(cu))
    idx.copy_(torch.tensor(slots))
    step()
    torch.cuda.synchronize()
# every gate form (kda_chunk_prep.cuh's split and exact paths; K3): the softplus gate with A = 16 (every chunk on the
# exact path) and a given gate masked at -1000 (no A_log, no dt_bias: null pointers, never read), on each path, with
# offsets no check saw and states in and out in place; and grouped value heads (2 query heads, 4 value heads)
import math
from kda_nb.kernels import launch
from kda_nb.layout import Form
from kda_nb.plan import path_plan, sm_count
for form, kw in ((Form(safe_gate=False), dict(gate='g=8', A_log=math.log(16), safe_gate=False)),
                 (Form(use_gate_in_kernel=False, safe_gate=False), dict(use_gate_in_kernel=False, safe_gate=False)),
                 (Form(safe_gate=False), dict(safe_gate=False, HV=4))):
    for path, steps in (('chunked', 3), ('fused', 1), ('decode', 1)):
        for cu in ([0, 5, 17, 40], [-5, 10, 40], [40, 0, 40]):
            inp = random_inputs(1, 40, 2, 128, device='cuda', seed=11, **kw)
            if not form.use_gate_in_kernel: inp['g'][0, ::4] = -1000.0
            out = torch.empty_like(inp['v'])
            HV = inp['v'].shape[2]
            s = torch.randn(len(cu) - 1, HV, 128, 128, device='cuda')
            plan = path_plan(path, 'sanitize', 1, 40, HV, len(cu) - 1, True,
                             0 if path == 'decode' else sm_count(inp['q'].device), steps)
            launch(plan, inp['q'], inp['k'], inp['v'], inp['g'], inp['beta'], inp['scale'], out, inp['A_log'],
                   inp['dt_bias'], None, s, s, torch.tensor(cu, device='cuda'), None, form=form)
            torch.cuda.synchronize()
            assert torch.isfinite(out).all()
# The checkpoints of K2 and the fused kernel (04_kernels, *Checkpoints in K2*): tables no check has seen (offsets
# negative, past a sequence, unaligned, the int64 extremes; slots -1, the pool's size, the extremes), valid entries
# among them (offset 0, 16 and a sequence's length, for empty and one-token sequences and a padding one), into fp32 and
# bf16 pools in place, K2 in one step and in a pipeline of three, the fused kernel ('fused'), on offsets no check saw
big = 2 ** 62
for pool_dtype, steps, cu in ((torch.float32, 1, [0, 40, 41, 41, 75]), (torch.bfloat16, 3, [0, 40, 41, 41, 75]),
                              (torch.float32, 3, [-5, 40, 2 ** 40, 41, 75]), (torch.bfloat16, 'fused', [0, 40, 41, 41, 75]),
                              (torch.float32, 'fused', [-5, 40, 2 ** 40, 41, 75])):
    inp = random_inputs(1, 75, 2, 128, state=None, device='cuda', seed=13)
    pool = torch.randn(6, 2, 128, 128, device='cuda').to(pool_dtype)
    offs = torch.tensor([[0, 16, 40, -16, 7, big, -big, 32],
                         [1, 0, 16, -1, 2, big, 17, 0],
                         [0, 0, 16, 1, -big, 0, 0, 0],
                         [34, 32, 16, 0, 33, 48, 3, big]], device='cuda')
    slots = torch.tensor([[4, 5, -1, 4, 4, 4, 5, 6],
                          [5, -1, 4, big, -big, 6, 4, 5],
                          [4, 5, -1, 5, 4, 6, 7, -1],
                          [5, 4, 5, -2, 4, 4, 4, 4]], device='cuda')
    plan = path_plan('fused' if steps == 'fused' else 'chunked', 'sanitize', 1, 75, 2, 4, True, sm_count(inp['q'].device),
                     1 if steps == 'fused' else steps)
    out = torch.empty_like(inp['v'])
    launch(plan, inp['q'], inp['k'], inp['v'], inp['g'], inp['beta'], inp['scale'], out, inp['A_log'], inp['dt_bias'],
           inp['lower_bound'], pool, pool, torch.tensor(cu, device='cuda'), torch.tensor([0, 1, -1, 3], device='cuda'),
           ckpt_offsets=offs, ckpt_slots=slots)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and torch.isfinite(pool.float()).all()
# head dims below 128 (the instances with DIMS, kda_switch.h §dims): tensors at their own K, V, no padding around them, so
# a read or write past V or K lands outside them: K1 + K2 in one step and in three, K3, fixed and varlen, states in and
# out in fp32 and bf16, adversarial offsets, a pool [P, H, V, K] with a padding sequence and an index outside it, K2's
# checkpoints into it
from kda_nb.plan import path_plan, sm_count
from kda_nb.kernels import launch
for K, V in ((64, 64), (96, 40), (128, 64), (64, 128)):
    for path, steps in (('chunked', 1), ('chunked', 3), ('decode', 1)):
        for seqlens, B, T, st in ((None, 2, 40, 'bf16'), ([5, 17, 0, 33], 1, 0, 'fp32')):
            inp = random_inputs(B, T, 2, K, V, seqlens=seqlens, state=st, device='cuda', seed=K + V)
            o, s = run_kernels(inp, 'fp32' if st == 'bf16' else 'bf16', path=path, steps=steps)
            torch.cuda.synchronize()
            assert torch.isfinite(o).all() and torch.isfinite(s.float()).all()
        for cu in ([0, 19, 60], [-5, 10, 40], [40, 0, 40]):
            inp = random_inputs(1, 40, 2, K, V, device='cuda', seed=K)
            inp['cu_seqlens'] = torch.tensor(cu, device='cuda')
            inp['initial_state'] = torch.randn(len(cu) - 1, 2, V, K, device='cuda')
            run_kernels(inp, path=path, steps=steps)
            torch.cuda.synchronize()
        inp = random_inputs(1, 0, 2, K, V, seqlens=[50, 17, 9, 30], device='cuda', seed=V)
        pool = torch.randn(3, 2, V, K, device='cuda')
        out = torch.empty_like(inp['v'])
        fwd_cuda(**{k: x for k, x in inp.items() if k != 'initial_state'}, out=out, initial_state=pool,
                 final_state=pool, state_indices=torch.tensor([2, -1, 99, 0], device='cuda'), path=path, steps=steps)
        torch.cuda.synchronize()
        assert torch.isfinite(out).all() and (out[:, 50:67] == 0).all()
    inp = random_inputs(1, 0, 2, K, V, seqlens=[40, 64], state=None, device='cuda', seed=6)
    pool = torch.randn(8, 2, V, K, device='cuda')
    out = torch.empty_like(inp['v'])
    launch(path_plan('chunked', 'sanitize', 1, 104, 2, 2, True, sm_count('cuda')), inp['q'], inp['k'], inp['v'], inp['g'],
           inp['beta'], inp['scale'], out, inp['A_log'], inp['dt_bias'], inp['lower_bound'], pool, pool,
           inp['cu_seqlens'], torch.tensor([6, 7], device='cuda'),
           ckpt_offsets=torch.tensor([[0, 16, 40], [32, 64, 17]], device='cuda'),
           ckpt_slots=torch.tensor([[0, 1, 2], [3, 99, -1]], device='cuda'))
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and torch.isfinite(pool).all()
# the chain of entry states (kda_entry_scan.cu) on grids no check has seen (values negative, the padding row P, past it,
# the int64 extremes, a row after the padding), every instance (8, 16, 32 rows a block), K = V = 128, V = 100 with
# K = 64, an odd K (its 4-byte copies and padded rows)
from kda_nb.kernels import load_kernels
ext = load_kernels()
for (HV, V, K), rows in (((2, 128, 128), 8), ((3, 100, 64), 16), ((2, 5, 37), 32)):
    P, N = 6, 3
    M = torch.randn(P, HV, K, K, device='cuda') / K ** 0.5
    X, initial = torch.randn(P, HV, V, K, device='cuda'), torch.randn(N, HV, V, K, device='cuda')
    for grid in ([[0, 1, 2], [3, 4, 5]], [[5, -1, 2], [P, 0, 2 ** 62], [1, 3, -2 ** 63]], [[P, P, 4], [2, 3, P], [0, 1, 5]]):
        E = ext.kda_entry_scan(initial, X, M, torch.tensor(grid, device='cuda'), rows, False)
        torch.cuda.synchronize()
    assert torch.isfinite(ext.kda_entry_scan(initial, X, M, torch.tensor([[0, 1, 2], [3, 4, 5]], device='cuda'), rows, True)).all()
# K2's states only (outputs=False, with zero_values, and copying only the records' parts the states read: lean_record) on
# the chunked path, varlen with adversarial offsets and a pool with a padding slot: out is left untouched
from kda_nb.kernels import launch
from kda_nb.plan import path_plan
inp = random_inputs(1, 0, 2, 128, seqlens=[5, 0, 40, 17], state=None, device='cuda', seed=21)
cu = inp['cu_seqlens'].clone()
cu[1], cu[3] = -7, 2 ** 40
pool = torch.randn(6, 2, 128, 128, device='cuda')
for steps, zero, lean in ((1, False, False), (3, False, False), (1, True, False), (1, False, True), (3, True, True)):
    out = torch.full(inp['v'].shape, float('nan'), device='cuda', dtype=inp['v'].dtype)
    launch(path_plan('chunked', 'sanitizer', 1, inp['v'].shape[1], 2, 4, True, 132, steps), inp['q'], inp['k'], inp['v'],
           inp['g'], inp['beta'], inp['scale'], out, inp['A_log'], inp['dt_bias'], inp['lower_bound'], pool, pool, cu,
           torch.tensor([2, -1, 9, 0], device='cuda'), outputs=False, zero_values=zero, lean_record=lean)
    torch.cuda.synchronize()
    assert out.isnan().all()
# ... and the states with the transitions in one launch (kda_recurrence.cuh §paired), lean records or not
for lean in (False, True):
    out, moves = torch.full(inp['v'].shape, float('nan'), device='cuda', dtype=inp['v'].dtype), torch.empty(4, 2, 128, 128, device='cuda')
    launch(path_plan('chunked', 'sanitizer', 1, inp['v'].shape[1], 2, 4, True, 132, 1), inp['q'], inp['k'], inp['v'],
           inp['g'], inp['beta'], inp['scale'], out, inp['A_log'], inp['dt_bias'], inp['lower_bound'], pool, pool, cu,
           torch.tensor([2, -1, 9, 0], device='cuda'), outputs=False, lean_record=lean, transitions=moves)
    torch.cuda.synchronize()
    assert out.isnan().all()
# the backward's two passes (kda_bwd_states.cu): fixed and varlen, empty and one-token sequences, offsets no check saw
'''

SANITIZE_BACKWARD = '''
import torch
from kda_nb.layout import random_inputs
from kda_nb.backward_kernels import kda_backward_cuda
ARGS = ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias', 'scale', 'lower_bound', 'initial_state', 'cu_seqlens')
def backward(inp):
    grads = kda_backward_cuda(**{k: inp[k] for k in ARGS}, grad_out=torch.randn(inp['v'].shape, device='cuda'),
                              grad_state=torch.randn_like(inp['initial_state']))
    torch.cuda.synchronize()
    assert all(torch.isfinite(g).all() for g in grads if g is not None)
for seqlens, B, T in ((None, 2, 40), ([5, 17, 0, 1, 33], 1, 0)):
    backward(random_inputs(B, T, 2, 128, seqlens=seqlens, device='cuda', seed=8))
for cu in ([0, 19, 60], [-5, 10, 40], [0, 10, 2**62], [40, 0, 40]):
    inp = random_inputs(1, 40, 2, 128, device='cuda', seed=9)
    inp['cu_seqlens'] = torch.tensor(cu, device='cuda')
    inp['initial_state'] = torch.randn(len(cu) - 1, 2, 128, 128, device='cuda')
    backward(inp)
inp = random_inputs(1, 0, 2, 128, seqlens=[3, 40, 1], device='cuda', seed=10)   # fp32 states, bf16 gradients, no upstream one
kda_backward_cuda(**{k: inp[k] for k in ARGS}, states_dtype=torch.float32, grads_dtype=torch.bfloat16)
def shifted(x):                                     # the same values 2 bytes past a 16-byte boundary: the element-wise copies
    return torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)[1:].view(x.shape).copy_(x)
inp['v'] = shifted(inp['v'])
kda_backward_cuda(**{k: inp[k] for k in ARGS}, grad_out=shifted(torch.randn_like(inp['v'])))
torch.cuda.synchronize()
# the entry gradients alone (kda_bwd_dstates's entry instances) and a full call on the chunk factors they left, on
# offsets no check saw
for cu in ([0, 5, 17, 40], [-5, 10, 40], [40, 0, 40]):
    inp = random_inputs(1, 40, 2, 128, device='cuda', seed=13)
    inp['cu_seqlens'] = torch.tensor(cu, device='cuda')
    inp['initial_state'] = torch.randn(len(cu) - 1, 2, 128, 128, device='cuda')
    go, kept = torch.randn(inp['v'].shape, device='cuda'), {}
    kda_backward_cuda(**{k: inp[k] for k in ARGS}, grad_out=go, entry_only=True, entry_kernel=True, chunk_factors=kept)
    backward_args = {k: inp[k] for k in ARGS}
    grads = kda_backward_cuda(**backward_args, grad_out=go, chunk_factors=kept)
    torch.cuda.synchronize()
    assert all(torch.isfinite(g).all() for g in grads if g is not None)
# every form of the backward's kernels (kda_bwd_chunk.cu: the gate form's kernels, the exact path of unbounded decays):
# the softplus gate at A = 16, a given gate masked at -1000, beta as probabilities with q, k normalised outside, the
# softplus gate with allow_neg_eigval; varlen with offsets no check saw, fp32 and bf16 states, bf16 gradients
import math
from kda_nb.layout import Form
for opts, extra in ((dict(safe_gate=False), dict(A_log=math.log(16))), (dict(use_gate_in_kernel=False, safe_gate=False), {}),
                    (dict(use_beta_sigmoid_in_kernel=False, use_qk_l2norm_in_kernel=False), {}),
                    (dict(safe_gate=False, allow_neg_eigval=True), {})):
    for cu in ([0, 5, 17, 40], [-5, 10, 40], [40, 0, 40]):
        for states in (torch.float32, torch.bfloat16):
            inp = random_inputs(1, 40, 2, 128, device='cuda', seed=12, **opts, **extra)
            if not opts.get('use_gate_in_kernel', True): inp['g'][0, ::4] = -1000.0
            inp['cu_seqlens'] = torch.tensor(cu, device='cuda')
            inp['initial_state'] = torch.randn(len(cu) - 1, 2, 128, 128, device='cuda')
            grads = kda_backward_cuda(**{k: inp[k] for k in ARGS}, grad_out=torch.randn(inp['v'].shape, device='cuda'),
                                      grad_state=torch.randn_like(inp['initial_state']), states_dtype=states,
                                      grads_dtype=torch.bfloat16, form=Form(**opts))
            torch.cuda.synchronize()
            assert all(torch.isfinite(g).all() for g in grads if g is not None), (opts, cu)
# fp16 inputs (kda_bwd_*'s fp16 instances, asked for by a plan of their own: kda_nb.plan.FP16_BACKWARD aside): the safe
# gate's instance (FlashKDA's form in fp16) and the softplus gate's, both k-splits of the passes, an fp16 upstream gradient
# (its loads in every kernel; 2 bytes past a 16-byte boundary, the element-wise copies) and fp16 gradients, offsets no
# check saw
from kda_nb.plan import BackwardPlan
fp16_plan = BackwardPlan('cuda', 'the sanitizer: the fp16 instances')
for opts, ks in (({}, 2), (dict(safe_gate=False), 1)):
    for cu in ([0, 5, 17, 40], [-5, 10, 40]):
        inp = random_inputs(1, 40, 2, 128, device='cuda', seed=13, dtype=torch.float16, **opts)
        inp['cu_seqlens'] = torch.tensor(cu, device='cuda')
        inp['initial_state'] = torch.randn(len(cu) - 1, 2, 128, 128, device='cuda')
        for go in (torch.randn(inp['v'].shape, device='cuda', dtype=torch.float16),
                   shifted(torch.randn(inp['v'].shape, device='cuda', dtype=torch.float16))):
            grads = kda_backward_cuda(**{k: inp[k] for k in ARGS}, grad_out=go, grad_state=torch.randn_like(inp['initial_state']),
                                      grads_dtype=torch.float16, ksplit=ks, plan=fp16_plan, form=Form(**opts))
            torch.cuda.synchronize()
            assert grads[0].dtype == torch.float16 and all(torch.isfinite(g).all() for g in grads if g is not None), (opts, cu)
print('sanitizer cases ran')
'''


def sanitize(tool: str = 'memcheck', text: bool = False, cases: str | None = None) -> tuple:
    "Run the small kernel cases (`cases`: default all, forward and backward) under `compute-sanitizer --tool <tool>`: `(exit code, summary line)`, and its whole output if `text`."
    exe = shutil.which('compute-sanitizer')
    if exe is None: raise FileNotFoundError("compute-sanitizer is not on PATH")
    load_kernels()                                     # build outside the sanitizer, which would be slow
    # without torch's caching allocator every tensor is its own allocation, so that an access past a
    # tensor's end is outside any allocation, where memcheck sees it
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING='1')
    script = cases if cases is not None else SANITIZE_CASE + SANITIZE_BACKWARD
    res = subprocess.run([exe, '--tool', tool, '--error-exitcode', '99', sys.executable, '-c', script],
                         capture_output=True, text=True, timeout=600, env=env)
    out = res.stdout + res.stderr
    summary = next((l for l in reversed(out.splitlines()) if 'ERROR SUMMARY' in l or 'RACECHECK SUMMARY' in l), '')
    return (res.returncode, summary or out[-2000:]) + ((out,) if text else ())

def race_reports(out: str) -> list[str]:
    "The hazards racecheck reported in its output `out`: 'write site -> read site' per pair of code lines, a site as 'function file:line'."
    def site(kind, where, place):
        name = re.sub(r'^void ', '', where).split('(')[0].split('<')[0]
        return f"{kind} {name} {place}"
    pairs, write = [], None
    for line in out.splitlines():
        if m := re.search(r'Race reported between (\w+) access at (.+?)\+0x\w+ in (\S+)', line): write = site(*m.groups())
        elif write and (m := re.search(r'and (\w+) access at (.+?)\+0x\w+ in (\S+)', line)): pairs.append(f"{write} -> {site(*m.groups())}")
    return sorted(set(pairs))


def main() -> int:
    "memcheck, then racecheck, with their summaries and racecheck's pairs of code lines; `--backward`: the backward's cases only."
    cases = SANITIZE_BACKWARD if '--backward' in sys.argv[1:] else None
    code, summary = sanitize('memcheck', cases=cases)
    print(f"memcheck: exit {code}, {summary.strip()}")
    rcode, rsummary, out = sanitize('racecheck', text=True, cases=cases)
    print(f"racecheck: exit {rcode}, {rsummary.strip()}")
    for r in race_reports(out): print(' ', r)
    return 0 if code == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
