"""The harness of the suite: tiers, the repository's tools run as a user runs them, the generated
data and a local release server. What the tests compare against (tiny archs, the restated official
computations, timm's references) is importable from :mod:`mmhvit.testing`.

Tiers (every test module declares one with ``pytestmark``):

- ``unit``: small models and layers built in this process: no tool subprocess, no training run.
  ``bash tools/run_tests.sh --quick`` runs them, less those also marked ``slow`` (a converter tool
  run in a subprocess, an MMPretrain classifier, seconds of full-size work).
- ``integration``: the repository's tools and the OpenMMLab stack (scripts, converters, configs,
  registries, export, packaging), in a subprocess or in this process.
- ``e2e``: training and testing runs end to end (tools/train.py, tools/test.py, launchers).
"""
import functools
import gc
import glob
import http.server
import json
import logging
import os
import os.path as osp
import runpy
import socket
import subprocess
import sys
import threading

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
TIERS = ('unit', 'integration', 'e2e')


def pytest_configure(config):
    _read_model_indexes_once()
    config.addinivalue_line('markers', 'unit: small models and layers in this process (the quick '
                            'tier: tools/run_tests.sh --quick)')
    config.addinivalue_line('markers', 'integration: the tools and the OpenMMLab stack')
    config.addinivalue_line('markers', 'e2e: training / testing runs end to end')
    config.addinivalue_line('markers', 'slow: a unit test left out of the quick tier (a converter '
                            'tool, an MMPretrain classifier, seconds of full-size work)')


def _read_model_indexes_once():
    """MMEngine resolves each ``mmdet::`` / ``mmseg::`` / ``mmpretrain::`` base of a config by
    reading that package's whole model index again (about 1,600 YAML files: 0.6 s a quickstart
    config); the installed packages do not change during a session, so the suite reads each index
    file once. Configs resolve exactly as before (only ``_get_cfg_metainfo`` reads these files)."""
    import mmengine.config.utils as config_utils
    config_utils.load = functools.lru_cache(maxsize=None)(config_utils.load)


def pytest_collection_modifyitems(config, items):
    """Every test belongs to exactly one tier."""
    for item in items:
        tiers = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if len(tiers) != 1:
            raise pytest.UsageError(f'{item.nodeid}: tier markers {sorted(tiers)}; give its module '
                                    f'one of {TIERS} (pytestmark)')


@pytest.fixture(autouse=True)
def earlier_objects_frozen():
    """A ``gc.collect()`` during a test (MMEngine calls one for each dataset it builds) scans only
    the objects the test creates, not the whole session's heap: 0.6 s a call in this process, 15
    calls in four quickstart runs. The earlier objects are collectable again after the test."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def mmengine_loggers_write_to_this_test():
    """An MMEngine logger prints to the ``sys.stdout`` of its creation: in a test run in this
    process with ``capsys``, a capture closed after that test. Later tests' messages would end in a
    logging error on stderr; they go to the present ``sys.stdout`` instead."""
    from mmengine.logging import MMLogger
    for logger in list(MMLogger._instance_dict.values()):
        for handler in logger.handlers:
            if type(handler) is logging.StreamHandler and getattr(handler.stream, 'closed', False):
                handler.stream = sys.stdout  # setStream would flush the closed one


def run_tool(*args, timeout=600, env=None, check=True):
    """Run a repository script with this interpreter, as a user would; returns stdout + stderr."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)
    output = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f'{args} exited with {proc.returncode}:\n{output[-6000:]}')
    return output


def tool_env():
    """This environment with the repository first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env['PYTHONPATH'] = REPO + os.pathsep + env.get('PYTHONPATH', '')
    return env


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (a process group's master port)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run_in_process(script, *args):
    """Run a repository script in this process (``runpy``), as ``python script args`` would."""
    argv = sys.argv
    sys.argv = [script, *args]
    try:
        runpy.run_path(osp.join(REPO, script), run_name='__main__')
    finally:
        sys.argv = argv


def official_keys(family, name):
    """Key -> shape of an official state dict, as listed in tests/data."""
    from mmhvit.testing import read_key_list
    return read_key_list(osp.join(REPO, 'tests', 'data', f'{family}_official_keys_{name}.txt'))


# --- short runs of the quickstart configs on the generated shapes data ---------------------------
DETECTOR_CONFIGS = {
    'retinanet': 'configs/quickstart/retinanet_transcnn-q_16e_shapes.py',
    'mask-rcnn': 'configs/quickstart/mask-rcnn_transcnn-q_16e_shapes.py',
}


def short_run_options(data_root, epochs=1):
    """--cfg-options for a detector config: ``epochs`` epochs on ``data_root``, no workers."""
    root = str(data_root) + '/'
    return [
        f'train_cfg.max_epochs={epochs}', f'train_cfg.val_interval={epochs}',
        f'default_hooks.checkpoint.interval={epochs}', 'default_hooks.logger.interval=1',
        'train_dataloader.batch_size=2', 'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False', 'val_dataloader.num_workers=0',
        'val_dataloader.persistent_workers=False', 'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        f'train_dataloader.dataset.data_root={root}', f'val_dataloader.dataset.data_root={root}',
        f'test_dataloader.dataset.data_root={root}',
        f'val_evaluator.ann_file={root}annotations/instances_val.json',
        f'test_evaluator.ann_file={root}annotations/instances_val.json',
    ]


def subset_options(algo, data_root, work_dir, name):
    """--cfg-options for any quickstart config: a couple of iterations on 4 train images;
    evaluation on 2 val images."""
    root = str(data_root) + '/'
    options = [
        f'experiment_name={name}', 'train_cfg.max_epochs=1', 'default_hooks.logger.interval=1',
        'train_dataloader.batch_size=2', 'val_dataloader.batch_size=1',
        'test_dataloader.batch_size=1'
    ]
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        options += [f'{loader}.num_workers=0', f'{loader}.persistent_workers=False',
                    f'{loader}.dataset.indices={4 if loader == "train_dataloader" else 2}']
    if algo == 'classifier':
        options += [f'{loader}.dataset.data_root={root}crops'
                    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')]
    else:
        options += [f'{loader}.dataset.data_root={root}'
                    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')]
    if algo == 'upernet':  # its classifier checkpoint: test_upernet_starts_from_its_classifier
        options.append('model.backbone.init_cfg=None')
    if algo in ('retinanet', 'mask-rcnn', 'mask2former'):
        ann = f'{root}annotations/instances_val.json'
        options += [f'val_evaluator.ann_file={ann}', f'test_evaluator.ann_file={ann}']
    return options


@pytest.fixture(scope='session')
def tiny_shapes(tmp_path_factory):
    """A tiny generated shapes dataset, every layout (8 train, 4 val scenes)."""
    out = tmp_path_factory.mktemp('data') / 'shapes'
    run_tool('tools/dataset_converters/make_shapes.py', '--out', str(out), '--train', '8',
             '--val', '4', '--seed', '1')
    return out


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory and records the path of every GET (the test counts downloads)."""

    def do_GET(self):
        self.server.requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


class ServedFiles:
    """Files under ``root`` served at ``base`` (a release page stand-in), and torch's hub cache."""

    def __init__(self, root, base, requests, cache_dir):
        self.root, self.base, self.requests, self.cache_dir = root, base, requests, cache_dir

    def put(self, name, content):
        """Serve ``content`` (bytes, or an object to ``torch.save``) as ``name``; its URL."""
        import torch
        path = self.root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            torch.save(content, path)
        return self.url(name)

    def url(self, name):
        return f'{self.base}/{name}'

    def count(self, name):
        return sum(1 for path in self.requests if path.split('?')[0] == f'/{name}')


@pytest.fixture
def release_server(tmp_path, monkeypatch):
    """An HTTP server on 127.0.0.1 serving a fresh directory, with ``TORCH_HOME`` (hence the hub
    cache, ``torch.hub.get_dir()/checkpoints``) in a fresh directory of the test, also for the
    tools it starts."""
    root = tmp_path / 'release'
    root.mkdir()
    handler = functools.partial(_CountingHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    try:
        yield ServedFiles(root, f'http://127.0.0.1:{server.server_port}', server.requests,
                          tmp_path / 'torch_home' / 'hub' / 'checkpoints')
    finally:
        server.shutdown()
        server.server_close()


def training_scalars(work_dir):
    """Every logged training record of every run (timestamp folder) in ``work_dir``."""
    records = []
    for path in sorted(glob.glob(str(work_dir / '*' / 'vis_data' / 'scalars.json'))):
        records += [json.loads(line) for line in open(path) if '"loss"' in line]
    return records
