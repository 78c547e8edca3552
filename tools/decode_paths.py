"""Time K3 (decode) against the chunked kernels on this GPU; write benchmarks/decode_paths_<tag>.json.

    python tools/decode_paths.py [tag]        # tag: h200 by default

The decode notebook (nbs/04a_decode.ipynb) draws its table and figure from the file this writes, with
kda_nb.bench.plot_paths; measure_paths lives beside it in kda_nb.bench.paths (nbs/07k_bench_paths.ipynb).
"""
import json
import sys
from pathlib import Path

import torch

from kda_nb.bench.paths import measure_paths
from kda_nb.kernels import kernels_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]

if __name__ == '__main__':
    if (why := kernels_unavailable_reason()) is not None: sys.exit(f"decode_paths: cannot measure here: {why}")
    tag = sys.argv[1] if len(sys.argv) > 1 else 'h200'
    rows = measure_paths()
    path = ROOT / 'benchmarks' / f'decode_paths_{tag}.json'
    path.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), indent=1) + '\n')
    for r in rows:
        print(f"N={r['N']:4d} L={r['L']:3d}  decode {r['decode_us']:8.1f}  chunked {r['chunked_us']:8.1f}  "
              f"floor {r['floor_us']:7.1f} us")
    print(f"wrote {path.relative_to(ROOT)}")
