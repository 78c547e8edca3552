"""FlashKDA's accuracy sweep on the kernels (and fla's chunk_kda, if installed), and its plot.

A lab helper beside the library (it imports the peers, which the library may not): the kernels notebook's
*FlashKDA's accuracy sweep* runs it on the H200. T = 8192, one head, q, k, v uniform in [0, 1), a random fp32
initial state, the ten gate cases; each against the fp64 recurrence, on K1 and K2 in one step.

    python tools/gate_sweep.py          # the fixed-length and the six-sequence tables
"""
import sys

import torch

from kda_nb.kernels import kernels_unavailable_reason
from kda_nb.plan import run_kernels
from kda_nb.layout import ANCHOR_T, GATE_CASES, VARLEN_SIX, random_inputs, rel_rms
from kda_nb.recurrence import kda_recurrent


def gate_sweep(T: int = ANCHOR_T, seqlens: list[int] | None = None, seed: int = 0, peers: bool = True) -> list[dict]:
    "Relative RMS errors against the fp64 recurrence of the kernels (and fla, if installed) on the gate sweep."
    from kda_nb.peers import fla_forward, fla_unavailable_reason
    rows = []
    for i, gate in enumerate(GATE_CASES):
        inp = random_inputs(1, T, 1, 128, seqlens=seqlens, gate=gate, seed=seed + i, device='cuda')
        o64, s64 = kda_recurrent(**inp)
        o, s = run_kernels(inp)
        row = dict(case=gate, kda_nb_out=rel_rms(o, o64), kda_nb_state=rel_rms(s, s64))
        if peers and fla_unavailable_reason() is None:
            fo, fs = fla_forward(**inp)
            row.update(fla_out=rel_rms(fo, o64), fla_state=rel_rms(fs, s64))
        rows.append(row)
    return rows


def plot_sweep(fixed: list[dict], varlen: list[dict]):
    "Bar chart of the sweep's errors per case: kda_nb beside fla, outputs and final states, fixed and varlen."
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(10, 5.5), sharex=True)
    for col, (title, rows) in enumerate([('fixed length, T = 8192', fixed), ('varlen, six sequences', varlen)]):
        for row_i, what in enumerate(('out', 'state')):
            ax = axes[row_i, col]
            x = torch.arange(len(rows)).float()
            impls = [i for i in ('kda_nb', 'fla') if f'{i}_{what}' in rows[0]]
            w = 0.8 / len(impls)
            for j, impl in enumerate(impls):
                ax.bar(x + (j - (len(impls) - 1) / 2) * w, [r[f'{impl}_{what}'] for r in rows], w, label=impl)
            limit = 5e-3 if col == 0 else 6e-3
            if what == 'out': ax.axhline(limit, color='k', lw=0.8, ls='--', label=f'FlashKDA test limit {limit:g}')
            ax.set_ylabel(f'rel. RMS error, {"outputs" if what == "out" else "final state"}')
            ax.set_title(title if row_i == 0 else '')
            ax.set_xticks(x, [r['case'] for r in rows], rotation=40, ha='right')
            ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def main() -> int:
    if (why := kernels_unavailable_reason()) is not None:
        print(f"gate_sweep: cannot run here: {why}")
        return 1
    for title, rows in (('fixed length, T = 8192', gate_sweep()), ('varlen, six sequences', gate_sweep(seqlens=VARLEN_SIX))):
        print(title)
        keys = [k for k in rows[0] if k != 'case']
        print(f"{'case':>14}" + ''.join(f"{k:>14}" for k in keys))
        for r in rows: print(f"{r['case']:>14}" + ''.join(f"{r[k]:14.2e}" for k in keys))
    return 0


if __name__ == '__main__':
    sys.exit(main())
