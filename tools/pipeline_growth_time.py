"""One long sequence on K1 + K2 with the pipeline's steps cut in growing lengths: each (steps, growth) timed in one
process, the outputs compared bit for bit with 4 equal steps'. For development (benchmarks/pipeline_growth_h200.md
holds the H200's numbers); a speed claim quotes the benchmark, with the peers in the same run.

    python tools/pipeline_growth_time.py [--rounds 7] [--out DIR]

The library cuts the steps with the binding's fixed PIPELINE_GROWTH. To time other growths this script builds a
variant of this tree's sources, in a temporary folder, whose binding has one more entry point,
kda_fwd_chunked_growth(<14 arguments>, steps, growth), the same as kda_fwd_chunked but for the growth handed to
launch_chunked. The variant never goes into the library. Its runs on 2026-12-04 used the same variant, made by hand."""
import json, shutil, statistics, sys, tempfile
from pathlib import Path

import torch

from kda_nb import kernels
from kda_nb.bench import time_calls
from kda_nb.layout import random_inputs

CASES = [('one of 8192, H = 96', 8192, 96), ('one of 8192, H = 64', 8192, 64), ('one of 32768, H = 32', 32768, 32)]
CONFIGS = [(4, 1.0), (4, 1.4), (4, 1.5), (4, 1.6), (4, 1.7), (4, 1.8), (4, 2.0), (5, 1.4), (5, 1.6), (3, 1.6)]
HEAD = 'void kda_fwd_chunked(KDA_CALL_PARAMS, int64_t steps) {'   # the entry point the variant copies
MARK = '// The fused path:'                                        # where the copy goes


def variant(folder: Path) -> Path:
    """This tree's kernel sources in `folder`, the binding with kda_fwd_chunked_growth added: a copy of the binding's own
    kda_fwd_chunked that takes the growth and hands it to launch_chunked."""
    for f in kernels.csrc_dir().iterdir():
        if f.is_file(): shutil.copy(f, folder / f.name)
    b = (folder / 'kda_binding.cpp').read_text()
    if HEAD not in b or MARK not in b: sys.exit(f"pipeline_growth_time: the binding has no '{HEAD}' or '{MARK}'")
    body = b[b.index(HEAD):b.index('\n}\n', b.index(HEAD)) + 3]
    entry = (body.replace(HEAD, 'void kda_fwd_chunked_growth(KDA_CALL_PARAMS, int64_t steps, double growth) {')
                 .replace('c.stream);', 'c.stream, growth);'))
    if 'c.stream, growth);' not in entry: sys.exit("pipeline_growth_time: kda_fwd_chunked's call of launch_chunked has changed")
    (folder / 'kda_binding.cpp').write_text(b.replace(MARK, entry + '\n' + MARK, 1))
    return folder


def main(rounds: int, out_dir: str | None):
    folder = variant(Path(tempfile.mkdtemp(prefix='kda_growth_')))
    sources = kernels.version_sources
    kernels.KERNEL_VERSIONS['growth'] = 'variant (tools/pipeline_growth_time.py)'
    kernels.version_sources = lambda version=kernels.KERNEL_VERSION: folder if version == 'growth' else sources(version)
    ext = kernels.load_kernels(version='growth')
    rows = []
    for name, T, H in CASES:
        inp = random_inputs(1, T, H, 128, device='cuda', state='bf16', seed=1)
        a = (inp['q'], inp['k'], inp['v'], inp['g'], inp['beta'], float(inp['scale']))
        outs = {c: (torch.empty_like(inp['v']), torch.empty_like(inp['initial_state'])) for c in CONFIGS}
        calls = {c: (lambda c=c: ext.kda_fwd_chunked_growth(*a, outs[c][0], inp['A_log'], inp['dt_bias'], float(inp['lower_bound']),
                                                           inp['initial_state'], outs[c][1], None, None, c[0], c[1]))
                 for c in CONFIGS}
        times = {c: [] for c in CONFIGS}
        for _ in range(rounds):                   # rounds interleave the configurations
            for c, f in calls.items():
                times[c].append(statistics.median(time_calls([f], 'cuda', warmup=3, max_calls=30, min_calls=10)))
        torch.cuda.synchronize()
        ref = outs[(4, 1.0)]
        print(name, flush=True)
        for c in CONFIGS:
            same = torch.equal(outs[c][0], ref[0]) and torch.equal(outs[c][1], ref[1])
            t = times[c]
            rows.append(dict(case=name, steps=c[0], growth=c[1], ms=statistics.median(t), range=[min(t), max(t)], same_bits=same))
            print(f"   {c[0]} steps, growth {c[1]}: {statistics.median(t):.4f} ms [{min(t):.4f}, {max(t):.4f}]"
                  f"{'' if same else '  DIFFERENT BITS FROM 4 EQUAL STEPS'}", flush=True)
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / 'pipeline_growth_time.json').write_text(json.dumps(rows, indent=1))


if __name__ == '__main__':
    if (why := kernels.kernels_unavailable_reason()) is not None: sys.exit(f"pipeline_growth_time: cannot run here: {why}")
    arg = lambda n, d: sys.argv[sys.argv.index(n) + 1] if n in sys.argv else d
    main(int(arg('--rounds', 7)), arg('--out', None))
