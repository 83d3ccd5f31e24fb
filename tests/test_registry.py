"""Every backbone builds by its scoped name from each OpenMMLab scope; plain names where safe."""
import json
import subprocess
import sys

import pytest
import torch
from conftest import REPO

from mmhvit.testing import TINY_ARCHS

pytestmark = pytest.mark.integration

SCOPES = ('mmdet', 'mmseg', 'mmpretrain')
PLAIN_NAMES = ('TransCNN', 'HATNet', 'NesT', 'PyramidTNT')  # mmpretrain owns a class named TNT
MODULES = {'PyramidTNT': 'pyramid_tnt'}  # the backbone module of a family, if not its name


def module_of(name):
    return f'mmhvit.models.backbones.{MODULES.get(name, name.lower())}'


def run_python(code: str) -> dict:
    """Run code in a fresh interpreter (nothing imported yet) and return the JSON it prints last."""
    proc = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


BUILD_ALL = '''
import json, sys
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.utils import import_modules_from_strings
cfg = Config(dict(custom_imports=dict(imports=['mmhvit'], allow_failed_imports=False))
             if {custom_imports} else dict())
if 'custom_imports' in cfg:
    import_modules_from_strings(**cfg.custom_imports)
import {scope}.registry
init_default_scope('{scope}')
from {scope}.registry import MODELS
built = {{}}
for name, kwargs in {tiny}.items():
    model = MODELS.build(dict(type='mmhvit.' + name, **kwargs))
    built[name] = type(model).__module__ + '.' + type(model).__name__
print(json.dumps(built))
'''


@pytest.mark.parametrize('custom_imports', [True, False])
@pytest.mark.parametrize('scope', SCOPES)
def test_scoped_names_build_our_classes(scope, custom_imports):
    built = run_python(BUILD_ALL.format(scope=scope, custom_imports=custom_imports,
                                        tiny=repr(TINY_ARCHS)))
    assert built == {name: f'{module_of(name)}.{name}' for name in TINY_ARCHS}


@pytest.mark.parametrize('scope', SCOPES)
def test_plain_names_after_custom_imports(scope):
    import importlib

    from mmengine.registry import init_default_scope

    import mmhvit  # noqa: F401  (what custom_imports does)
    registry = importlib.import_module(f'{scope}.registry')
    init_default_scope(scope)
    for name in PLAIN_NAMES:
        model = registry.MODELS.build(dict(type=name, **TINY_ARCHS[name]))
        assert type(model).__module__ == module_of(name)
        assert isinstance(model(torch.randn(1, 3, 64, 64)), tuple)


def test_mmpretrain_scope_keeps_its_own_tnt_and_scoped_name_gives_ours():
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS

    import mmhvit  # noqa: F401
    init_default_scope('mmpretrain')
    assert MODELS.get('TNT').__module__.startswith('mmpretrain.')
    ours = MODELS.build(dict(type='mmhvit.TNT', **TINY_ARCHS['TNT']))
    assert type(ours).__module__ == 'mmhvit.models.backbones.tnt'


def test_import_does_not_pull_downstream_libraries():
    loaded = run_python('import json, sys, mmhvit; '
                        'print(json.dumps(sorted(m for m in ("mmdet", "mmseg", "mmpretrain") '
                        'if m in sys.modules)))')
    assert loaded == []


def test_registry_scope_and_parent():
    from mmengine.registry import MODELS as ROOT

    from mmhvit.registry import MODELS
    assert MODELS.scope == 'mmhvit'
    assert MODELS.parent is ROOT
    assert set(TINY_ARCHS) <= set(MODELS.module_dict)
