"""fla's own kernel choices on a GPU, kept so that a later machine of the same kind need not autotune fla again.

fla's Triton kernels autotune on their first call for each shape class: on the H200 each class of the training
path took about 250 s (two classes, 463 compiled kernels, 2026-12-02), most of it compiling the candidates. Triton
writes each tuning result to its cache (`*.autotune.json`: the tuning key and every candidate's timings). fla can read
chosen configs back from a folder instead of tuning (`FLA_CONFIG_DIR`, with `FLA_CACHE_MODE`: `strict`, the same key
only; `fuzzy`, also keys that differ only in numbers), and then compiles one candidate per kernel.

    python tools/fla_configs.py extract CACHE_DIR OUT.json [--gpu NAME]   # here or there: the winners, one file
    python tools/fla_configs.py install OUT.json CONFIG_DIR              # on the GPU machine, before fla runs

then run fla with `FLA_CONFIG_DIR=CONFIG_DIR FLA_CACHE_MODE=strict` (or `fuzzy`). The file holds what fla's autotuner
measured and picked (configs and timings), no code of fla's. A record timed this way must say so: with `strict` the
kernels are those fla would pick itself on that machine for the keys it holds; `fuzzy` reuses them for other shapes.
"""
import argparse, hashlib, json, sys
from pathlib import Path


def key_hash(key) -> str:
    "The name fla gives a tuning key in a config file: md5 of its compact, sorted JSON."
    return hashlib.md5(json.dumps(key, separators=(",", ":"), sort_keys=True).encode()).hexdigest()


def winners(cache_dir: Path) -> dict:
    "`{kernel: [{'key', 'config', 'timings_ms', 'candidates'}...]}` from a Triton cache's autotune results."
    out = {}
    for f in sorted(Path(cache_dir).glob('*/*.autotune.json')):
        data = json.loads(f.read_text())
        name = f.name[:-len('.autotune.json')]
        tried = data.get('configs_timings') or []
        if not tried: continue
        config, timings = min(tried, key=lambda ct: ct[1])       # as Triton picks: the smallest timings, median first
        entry = dict(key=data['key'], config=config, timings_ms=timings, candidates=len(tried))
        if all(e['key'] != entry['key'] for e in out.get(name, [])): out.setdefault(name, []).append(entry)
    return out


def as_dtype(key: list, dtype: str) -> list:
    "A tuning key with its bf16 tensors named `dtype` instead (e.g. 'float16'): the same choice offered to that type."
    return [f'torch.{dtype}' if k == 'torch.bfloat16' else k for k in key]


def install(bundle: dict, config_dir: Path, dtypes=()) -> int:
    """One `{kernel}.json` per kernel in `config_dir`, as fla's config cache reads them; the number of entries.
    `dtypes` (e.g. `('float16',)`) also offers each bf16 winner to calls in those types: fla then compiles one
    candidate for them instead of tuning (tuning fla's fp16 training path took over 5 minutes on an H100); a
    correctness test may read them so, a timed record of those types must not."""
    config_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    for name, entries in bundle['kernels'].items():
        keys = [(e['key'], e) for e in entries] + [(as_dtype(e['key'], d), e) for d in dtypes for e in entries]
        table = {key_hash(k): dict(autotune_key=k, config=e['config']) for k, e in keys}
        (config_dir / f'{name}.json').write_text(json.dumps(dict(autotune_entries=table), indent=1))
        n += len(table)
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    ex = sub.add_parser('extract', help="the winners of a Triton cache's autotuning, as one JSON file")
    ex.add_argument('cache_dir')
    ex.add_argument('out')
    ex.add_argument('--gpu', default=None, help='the GPU they were measured on (recorded in the file)')
    ex.add_argument('--note', default='', help='what else the file should say (versions, shapes)')
    ins = sub.add_parser('install', help="write a file of winners as fla's config folder")
    ins.add_argument('bundle')
    ins.add_argument('config_dir')
    ins.add_argument('--also', nargs='*', default=[], metavar='DTYPE',
                     help="offer the bf16 winners to these types too (e.g. float16), for tests, never for a timed record")
    a = ap.parse_args(argv)
    if a.cmd == 'extract':
        kernels = winners(Path(a.cache_dir))
        if not kernels:
            print(f"no autotune results under {a.cache_dir}", file=sys.stderr)
            return 1
        Path(a.out).write_text(json.dumps(dict(gpu=a.gpu, note=a.note, kernels=kernels), indent=1))
        print(f"{sum(map(len, kernels.values()))} tuning results of {len(kernels)} kernels -> {a.out}")
    else:
        n = install(json.loads(Path(a.bundle).read_text()), Path(a.config_dir), a.also)
        print(f"{n} configs written to {a.config_dir}: run fla with FLA_CONFIG_DIR={a.config_dir} FLA_CACHE_MODE=strict")
    return 0


if __name__ == '__main__':
    sys.exit(main())
