"""The kernel listings the notebooks show are the kernels as they are.

A notebook cell that is only `show_source(file, section)` displays a `// §section` part of a `csrc/` file, and its
output is saved in the notebook, where the docs site shows it without running anything. An edit of the kernels that
moves or changes a section leaves that saved output behind, so the docs would show code that no longer exists. Here
each such saved output must equal what `show_source` gives for today's sources (refresh an output by running its cell).

Hand-written (tools/export_tests.py leaves it alone).
"""
import ast
import json
import re
from pathlib import Path

import pytest

from kda_nb.kernels import show_source

NBS = Path(__file__).resolve().parents[1] / 'nbs'
CALL = re.compile(r"show_source\((.*)\)")


def listings():
    "(notebook, cell id, arguments, saved markdown) of every cell that is only a show_source call."
    for nb in sorted(NBS.glob('*.ipynb')):
        for cell in json.loads(nb.read_text(encoding='utf-8'))['cells']:
            m = CALL.fullmatch(''.join(cell['source']).strip())
            if cell['cell_type'] != 'code' or not m: continue
            saved = [''.join(o['data']['text/markdown']) for o in cell.get('outputs', []) if 'text/markdown' in o.get('data', {})]
            yield nb.name, cell.get('id'), ast.literal_eval(f'({m.group(1)},)'), saved


LISTINGS = list(listings())


def test_the_notebooks_show_kernel_listings():
    assert len(LISTINGS) >= 30 and {nb for nb, *_ in LISTINGS} >= {'04_kernels.ipynb', '04a_decode.ipynb'}


@pytest.mark.parametrize('nb, cell, args, saved', LISTINGS, ids=[f'{nb}:{c}' for nb, c, *_ in LISTINGS])
def test_saved_listing_is_todays_source(nb, cell, args, saved):
    assert saved, f"{nb}, cell {cell}: show_source{args} has no saved output"
    assert saved[0] == show_source(*args).data, f"{nb}, cell {cell}: the saved show_source{args} is not today's source"
