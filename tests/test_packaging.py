"""The package as a user gets it: `python -m build` makes an sdist and a wheel that carries the
configs, model index, tools and demo under mmhvit/.mim; installed into a fresh venv (reusing this
environment's stack through a .pth file) and used from another directory, its `mmhvit` command
lists, finds and writes merged configs that build their models. And tools/setup_env.sh is quiet.

Nothing here touches the environment that runs the tests: every install goes into a temporary venv.
"""
import glob
import os
import os.path as osp
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest
import yaml
from conftest import REPO

pytestmark = pytest.mark.integration

# what a build needs, as a fresh clone has it (no venv, data, work dirs or earlier builds)
SKIP_TOP = {'.git', '.venv', 'data', 'work_dirs', 'build', 'dist'}
SKIP_ANYWHERE = shutil.ignore_patterns('__pycache__', '*.egg-info', '.pytest_cache', '*.pyc')


def clean_env(**extra):
    """The environment of a user's shell: no PYTHONPATH pointing at a source tree."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    return dict(env, **extra)


def run(cmd, cwd, env=None, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=clean_env(**(env or {})))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f'{cmd} exited with {proc.returncode}:\n{output[-6000:]}'
    return proc.stdout


def stack_venv(path, with_stack=True):
    """A venv without its own pip whose site-packages reach this environment's stack (.pth)."""
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(path)], check=True)
    python = path / 'bin' / 'python'
    site = run([str(python), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
               cwd=path).strip()
    if with_stack:
        with open(osp.join(site, 'stack.pth'), 'w') as f:
            f.write(sysconfig.get_paths()['purelib'] + '\n')
    return python, site


def configs_of_repo():
    return sorted(osp.relpath(p, osp.join(REPO, 'configs'))
                  for p in glob.glob(osp.join(REPO, 'configs', '**', '*.py'), recursive=True)
                  if not osp.basename(p).startswith('_'))


@pytest.fixture(scope='module')
def dist(tmp_path_factory):
    """sdist and wheel of a copy of the source tree, built offline as `python -m build` does."""
    tmp = tmp_path_factory.mktemp('build')
    src = tmp / 'src'
    shutil.copytree(REPO, src, ignore=lambda d, names: (
        set(SKIP_ANYWHERE(d, names)) | (SKIP_TOP & set(names) if d == REPO else set())))
    run([sys.executable, '-m', 'build', '--no-isolation', '--outdir', str(tmp / 'dist'), str(src)],
        cwd=tmp)
    wheels = glob.glob(str(tmp / 'dist' / '*.whl'))
    sdists = glob.glob(str(tmp / 'dist' / '*.tar.gz'))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(tmp / 'dist')
    return wheels[0], sdists[0]


@pytest.fixture(scope='module')
def installed(dist, tmp_path_factory):
    """The wheel installed into a fresh venv; returns (venv python, its site-packages, a work dir
    outside the source tree)."""
    tmp = tmp_path_factory.mktemp('wheel_venv')
    python, site = stack_venv(tmp / 'venv')
    # --ignore-installed: the stack may hold an editable mmhvit; pip leaves it alone either way
    # (it lies outside this venv), and this venv's own copy comes first on sys.path.
    run([str(python), '-m', 'pip', 'install', '--no-deps', '--no-index', '--ignore-installed',
         dist[0]], cwd=tmp)
    work = tmp / 'user'
    work.mkdir()
    return python, site, work


def test_wheel_carries_every_config_of_the_model_index(dist):
    from mmhvit.version import __version__
    wheel, sdist = dist
    assert osp.basename(wheel) == f'mmhvit-{__version__}-py3-none-any.whl'
    assert osp.basename(sdist) == f'mmhvit-{__version__}.tar.gz'
    names = set(zipfile.ZipFile(wheel).namelist())
    mim = 'mmhvit/.mim/'
    index = yaml.safe_load(zipfile.ZipFile(wheel).read(mim + 'model-index.yml'))
    listed = []
    for meta in index['Import']:
        assert mim + meta in names
        listed += [m['Config'] for m in yaml.safe_load(zipfile.ZipFile(wheel).read(mim + meta))[
            'Models']]
    source_models = yaml.safe_load(open(osp.join(REPO, 'configs', 'metafile.yml')))['Models']
    assert len(listed) == len(source_models) > 0, listed
    assert all(mim + config in names for config in listed), listed
    # every config and base of the source tree, the tools mim runs and the demo
    shipped = {n[len(mim) + len('configs/'):] for n in names if n.startswith(mim + 'configs/')}
    source = {osp.relpath(p, osp.join(REPO, 'configs'))
              for p in glob.glob(osp.join(REPO, 'configs', '**', '*'), recursive=True)
              if osp.isfile(p) and '__pycache__' not in p}
    assert shipped == source
    for tool in ('tools/train.py', 'tools/test.py', 'tools/dist_train.sh', 'demo/image_demo.py'):
        assert mim + tool in names
    # they set up a source checkout only
    assert not {mim + 'tools/setup_env.sh', mim + 'tools/misc/build_progress.py'} & names
    assert not any('__pycache__' in n for n in names)
    entry_points = zipfile.ZipFile(wheel).read(
        f'mmhvit-{__version__}.dist-info/entry_points.txt').decode()
    assert 'mmhvit = mmhvit.cli:main' in entry_points


def test_installed_command_lists_dumps_and_builds(installed, dist):
    python, site, work = installed
    command = osp.join(osp.dirname(python), 'mmhvit')
    assert run([command, 'list'], cwd=work).split() == configs_of_repo()

    out = run([str(python), '-m', 'mmhvit', 'dump', 'quickstart/retinanet_transcnn-q_16e_shapes',
               'merged', '--cfg-options', 'train_cfg.max_epochs=3'], cwd=work).strip()
    det = work / 'merged' / 'retinanet_transcnn-q_16e_shapes.py'
    assert out == osp.join('merged', det.name) and det.is_file()

    # In the venv, from the user's directory: the package and its configs are the wheel's; the
    # written config stands alone (no _base_) and builds its model in MMDet's registry.
    check = f'''
import os.path as osp, torch
import mmhvit
from mmdet.registry import MODELS
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmhvit.mim import find_config, mim_root
assert mmhvit.__file__.startswith({site!r}), mmhvit.__file__
assert mim_root() == osp.join({site!r}, 'mmhvit', '.mim'), mim_root()
assert find_config('nest_t_in1k') == osp.join(mim_root(), 'configs', 'nest_t_in1k.py')
lines = open({str(det)!r}).read().splitlines()
assert not any(line.startswith('_base_') for line in lines)
assert any(line.startswith('custom_imports = ') for line in lines)
cfg = Config.fromfile({str(det)!r})
init_default_scope('mmdet')
model = MODELS.build(cfg.model)
assert type(model.backbone).__module__ == 'mmhvit.models.backbones.transcnn', type(model.backbone)
print(cfg.train_cfg.max_epochs, len(model.extract_feat(torch.randn(1, 3, 96, 96))))
'''
    # the override; FPN's 5 levels
    assert run([str(python), '-c', check], cwd=work).split() == ['3', '5']


@pytest.mark.parametrize('config', [
    'retinanet_tnt_s_coco.py', 'upernet_nest_t_ade20k.py', 'transcnn_b_in1k.py',
    'quickstart/mask-rcnn_transcnn-q_16e_shapes.py'])  # every library; relative bases, {{_base_.x}}
def test_dumped_config_equals_its_source(config, tmp_path):
    """A config written by `mmhvit dump` loads to the same settings as its source."""
    from mmengine.config import Config

    from mmhvit.cli import dump_config
    dumped = dump_config(config, str(tmp_path))
    assert Config.fromfile(dumped).to_dict() == Config.fromfile(
        osp.join(REPO, 'configs', config)).to_dict()


def test_command_names_a_missing_config(capsys):
    from mmhvit.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(['path', 'no_such'])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith(
        "error: 'no_such' is neither a file nor a config of mmhvit")
    main(['path', 'configs/quickstart/upernet_r18_16e_shapes'])
    assert capsys.readouterr().out.strip() == osp.join(REPO, 'configs', 'quickstart',
                                                        'upernet_r18_16e_shapes.py')
    main(['path'])  # a source checkout: the repository's own configs/ and tools/
    assert capsys.readouterr().out.strip() == REPO


def setup_env(venv, log):
    """tools/setup_env.sh on `venv`, offline (every pin is met by the stack); its printed lines."""
    env = {'MMHVIT_VENV': str(venv), 'MMHVIT_SETUP_LOG': str(log), 'PIP_NO_INDEX': '1',
           'PIP_DISABLE_PIP_VERSION_CHECK': '1'}
    proc = subprocess.run(['bash', osp.join(REPO, 'tools', 'setup_env.sh')], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env=clean_env(**env))
    return proc.returncode, (proc.stdout + proc.stderr).splitlines()


def test_setup_env_is_quiet_and_its_second_run_short(tmp_path):
    """A venv that reaches the stack: the first run checks every step (one line each, with its
    time), links the package and stamps the venv; the second run is a handful of lines."""
    venv = tmp_path / 'venv'
    stack_venv(venv)
    log = tmp_path / 'setup.log'
    rc, first = setup_env(venv, log)
    assert rc == 0, '\n'.join(first)
    assert len(first) <= 8, first
    steps = [line for line in first if line.endswith(' s)')]
    assert len(steps) >= 4 and all(line.startswith('[setup_env] ') for line in first), first
    assert any('stack ok: torch' in line for line in first)
    assert str(log) in first[0] and 'Requirement already satisfied: torch' in log.read_text()
    assert glob.glob(str(venv / '.mmhvit-stack-*'))
    # the repository is linked into the temporary venv, not into the one running the tests
    assert glob.glob(str(venv / 'lib' / 'python*' / 'site-packages' / '__editable__*mmhvit*'))

    rc, second = setup_env(venv, log)
    assert rc == 0 and len(second) <= 5, second
    assert second[-1].startswith(f'[setup_env] environment already complete at {venv}')


def test_setup_env_failure_prints_the_log_tail(tmp_path):
    venv = tmp_path / 'venv'
    stack_venv(venv, with_stack=False)  # no pip and, offline, no way to get one
    log = tmp_path / 'setup.log'
    rc, lines = setup_env(venv, log)
    assert rc != 0
    assert any('FAILED: updating pip' in line for line in lines), lines
    assert any('No module named pip' in line for line in lines), lines  # from the log's tail
    assert lines[-1] == f'[setup_env] full log: {log}'
    assert len(lines) <= 2 + 40 + 2
