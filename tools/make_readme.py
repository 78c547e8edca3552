"""Write README.md from nbs/index.ipynb (what `nbdev_readme` does, without Quarto, which we cannot install).

Markdown cells are copied; code cells become ```python blocks followed by their saved text output;
cells marked `#| hide` or `#| export`/`#| default_exp` are left out; links to sibling notebooks are
pointed into nbs/. `--check` exits 1 if README.md is not what the notebook says (CI runs that).
"""
import re
import sys
from pathlib import Path

from execnb.nbio import read_nb

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = re.compile(r'^\s*#\|\s*(hide|export|exporti|default_exp)\b', re.M)
DIRECTIVE = re.compile(r'^\s*#\|.*\n?', re.M)


def readme_text(nb_path=ROOT / 'nbs' / 'index.ipynb') -> str:
    parts = [f'<!-- generated from nbs/{nb_path.name} by tools/make_readme.py: edit the notebook -->']
    for cell in read_nb(nb_path).cells:
        if cell.cell_type == 'markdown':
            parts.append(re.sub(r'\]\(((?:reports/)?\w+)\.ipynb(#[\w-]+)?\)', r'](nbs/\1.ipynb\2)', cell.source.strip()))
        elif cell.cell_type == 'code' and not HIDDEN.search(cell.source):
            code = DIRECTIVE.sub('', cell.source).strip()
            if code: parts.append(f'```python\n{code}\n```')
            outs = []
            for o in cell.get('outputs', []):
                if o.get('output_type') == 'stream': outs.append(''.join(o.get('text', '')))
                elif 'text/plain' in o.get('data', {}): outs.append(''.join(o['data']['text/plain']))
            if outs: parts.append('```\n' + '\n'.join(s.rstrip('\n') for s in outs) + '\n```')
    return '\n\n'.join(parts) + '\n'


if __name__ == '__main__':
    text, readme = readme_text(), ROOT / 'README.md'
    if '--check' in sys.argv:
        if readme.read_text(encoding='utf-8') != text:
            sys.exit('README.md is out of date: run `python tools/make_readme.py`')
    else:
        readme.write_text(text, encoding='utf-8')
