"""Where the configs, model index and tools are: ``mmhvit/.mim`` in an installed wheel (as in
OpenMMLab packages: the build copies them there, see setup.py), the repository itself in a source
checkout or an editable install."""
import glob
import os.path as osp
from typing import Dict, List

PACKAGE = osp.dirname(osp.abspath(__file__))


def mim_root() -> str:
    """The folder that holds ``configs/``, ``model-index.yml``, ``tools/`` and ``demo/``."""
    installed = osp.join(PACKAGE, '.mim')
    if osp.isfile(osp.join(installed, 'model-index.yml')):
        return installed
    source = osp.dirname(PACKAGE)
    if osp.isfile(osp.join(source, 'model-index.yml')) and osp.isdir(osp.join(source, 'configs')):
        return source
    raise FileNotFoundError(
        f'mmhvit at {PACKAGE} has no configs: neither {installed} (a wheel built with '
        '`python -m build`) nor a source checkout around it')


def list_configs(with_bases: bool = False) -> List[str]:
    """Config paths relative to ``configs/``; bases (``_name.py``) only with ``with_bases``."""
    root = osp.join(mim_root(), 'configs')
    paths = glob.glob(osp.join(root, '**', '*.py'), recursive=True)
    return sorted(osp.relpath(p, root) for p in paths
                  if with_bases or not osp.basename(p).startswith('_'))


def model_zoo() -> List[Dict]:
    """The models of every metafile the model index imports (OpenMMLab model-index format)."""
    import yaml
    root = mim_root()
    with open(osp.join(root, 'model-index.yml')) as f:
        index = yaml.safe_load(f)
    models = []
    for meta in index['Import']:
        with open(osp.join(root, meta)) as f:
            models += yaml.safe_load(f)['Models']
    return models


def find_config(name: str) -> str:
    """The path of a config given as a file path, a path under ``configs/`` (``.py`` optional), a
    model-zoo name or a config's unique file name."""
    if osp.isfile(name):
        return name
    configs = list_configs(with_bases=True)
    key = name[len('configs/'):] if name.startswith('configs/') else name
    key = key if key.endswith('.py') else key + '.py'
    root = osp.join(mim_root(), 'configs')
    if key in configs:
        return osp.join(root, key)
    for model in model_zoo():
        if model['Name'] == name:
            return osp.join(mim_root(), model['Config'])
    by_name = [c for c in configs if osp.basename(c) == key]
    if len(by_name) == 1:
        return osp.join(root, by_name[0])
    shown = ', '.join(c[:-3] for c in list_configs()[:4])
    raise FileNotFoundError(
        f'{name!r} is neither a file nor a config of mmhvit ({len(list_configs())} configs, e.g. '
        f'{shown}; `mmhvit list` shows them all, `mmhvit zoo` the model names)')
