"""Packaging for kda_nb: every setting comes from settings.ini (the nbdev 2 project format)."""
from configparser import ConfigParser
from pathlib import Path

import setuptools

here = Path(__file__).parent
cfg = ConfigParser(delimiters=['='])
cfg.read(here / 'settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['Planning', 'Pre-Alpha', 'Alpha', 'Beta', 'Production/Stable', 'Mature', 'Inactive']
lic_name, lic_classifier = licenses[cfg['license']]
min_python = cfg['min_python']
plot_requirements = cfg.get('plot_requirements', '').split()
fla_requirements = cfg.get('fla_requirements', '').split()

setuptools.setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    long_description=(here / 'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    author=cfg['author'],
    author_email=cfg['author_email'],
    url=cfg['git_url'],
    license=lic_name,
    keywords=cfg['keywords'].split(),
    classifiers=[
        f"Development Status :: {cfg['status']} - {statuses[int(cfg['status'])]}",
        f"Intended Audience :: {cfg['audience']}",
        f'License :: {lic_classifier}',
        f"Natural Language :: {cfg['language']}",
        'Programming Language :: Python :: 3',
    ],
    python_requires=f'>={min_python}',
    packages=setuptools.find_packages(include=[cfg['lib_name'], cfg['lib_name'] + '.*']),
    include_package_data=True,
    package_data={cfg['lib_name']: [f'csrc/*.{x}' for x in ('cu', 'cuh', 'h', 'cpp')]},  # kda_nb/csrc -> ../csrc: the current kernels (earlier ones live in git history)
    install_requires=cfg.get('requirements', '').split(),
    # plots: the figures and the report tables (matplotlib, pandas), which the library itself does not import;
    # fla: fla-core, for kda_nb.fla_backend (kda_nb inside fla's chunk_kda) and the comparisons with fla
    extras_require={'plots': plot_requirements, 'fla': fla_requirements,
                    'dev': plot_requirements + cfg.get('dev_requirements', '').split()},
    entry_points={
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f"{cfg['lib_name']}={cfg['lib_name']}._modidx:d"],
    },
    zip_safe=False,
)
