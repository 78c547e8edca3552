"""Are kda_nb's outputs bitwise those of an earlier build? The library's `fwd` (today's plan and kernels) against
an earlier version of the kernels built from git history and called through its own binding, on the same inputs.

    python tools/bitwise_before_after.py [VERSION]     # VERSION: a key of kda_nb.kernels.KERNEL_VERSIONS

A refactor that must not move behaviour (the house of issue 25) is checked with it on the H200: every case must
print `same bits`. Needs an SM90 GPU, nvcc and the git history that holds VERSION's commit.
"""
import sys

import torch

import kda_nb
from kda_nb.bench import version_call
from kda_nb.kernels import KERNEL_VERSIONS, kernels_unavailable_reason, load_kernels
from kda_nb.layout import random_inputs

CASES = [  # name, random_inputs arguments, state dtype out ('fp32', 'bf16' or None)
    ('H=96 fixed 8192, bf16 state', dict(B=1, T=8192, H=96), 'bf16'),
    ('H=96 six varlen, fp32 state', dict(seqlens=[1300, 547, 2048, 963, 271, 3063], H=96), 'fp32'),
    ('H=64 8 x 1024, bf16 state', dict(B=8, T=1024, H=64), 'bf16'),
    ('H=64 fixed 8192, fp32 state', dict(B=1, T=8192, H=64), 'fp32'),
    ('varlen with empties and 1-token', dict(seqlens=[0, 1, 17, 0, 300, 15, 16, 1000], H=4), 'fp32'),
    ('3000 short sequences', dict(seqlens=[(7 * i) % 23 for i in range(3000)], H=2), 'bf16'),
    ('fixed B=4 T=17, no state', dict(B=4, T=17, H=8, state=None), None),
    ('decode 256 x 1, fp32', dict(seqlens=[1] * 256, H=32), 'fp32'),
    ('decode fixed B=64 T=2', dict(B=64, T=2, H=8), 'bf16'),
]


def main(version: str) -> int:
    if (why := kernels_unavailable_reason()) is not None: sys.exit(f"bitwise_before_after: cannot run here: {why}")
    if version not in KERNEL_VERSIONS or not KERNEL_VERSIONS[version]:
        sys.exit(f"bitwise_before_after: VERSION must be an earlier version in KERNEL_VERSIONS, got {version!r}")
    load_kernels(version=version)
    bad = 0
    print(f"kda_nb fwd (this tree) against {version} ({KERNEL_VERSIONS[version][:7]}), bitwise:")
    for name, kw, state in CASES:
        kw = dict(kw)
        inp = random_inputs(kw.pop('B', 1), kw.pop('T', 0), kw.pop('H'), 128, device='cuda', seed=len(name), **kw)
        q, v = inp['q'], inp['v']
        N = q.shape[0] if inp.get('cu_seqlens') is None else inp['cu_seqlens'].numel() - 1
        sdt = {'fp32': torch.float32, 'bf16': torch.bfloat16, None: None}[state]
        results = []
        for who in ('new', 'old'):
            out = torch.full_like(v, float('nan'))
            fs = None if sdt is None else torch.full((N, q.shape[2], 128, 128), float('nan'), dtype=sdt, device='cuda')
            if who == 'new':
                args = {k: x for k, x in inp.items() if k != 'initial_state'}
                kda_nb.fwd(**args, out=out, initial_state=inp.get('initial_state'), final_state=fs)
            else:                                   # the earlier build through its own binding, on the plan's path
                lens = None if inp.get('cu_seqlens') is None else inp['cu_seqlens'].diff().tolist()
                version_call(version, inp, out, fs, seqlens=lens)()
            torch.cuda.synchronize()
            results.append((out, fs))
        (o1, s1), (o0, s0) = results
        same = torch.equal(o1.view(torch.int16), o0.view(torch.int16)) and (
            s1 is None or torch.equal(s1.view(torch.uint8), s0.view(torch.uint8)))
        path = kda_nb.plan_for(q, v, inp.get('initial_state'), fs, inp.get('cu_seqlens'),
                               seqlens=None if inp.get('cu_seqlens') is None else inp['cu_seqlens'].diff().tolist())
        print(f"  {name:34s} {path.path:8s} steps {path.steps}: {'same bits' if same else 'DIFFERENT'}", flush=True)
        bad += not same
    print(f"{len(CASES) - bad} of {len(CASES)} cases bitwise equal")
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else next(k for k, c in KERNEL_VERSIONS.items() if c)))
