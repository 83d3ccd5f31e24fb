"""tools/train.py on the generated shapes data, CPU only: compile, the launcher's pieces (a trained
run tested, killed and resumed: test_resume.py; tools/dist_train.sh and the Slurm scripts:
test_distributed.py)."""
import copy
import glob
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import DETECTOR_CONFIGS, REPO, free_port, run_tool, short_run_options

pytestmark = pytest.mark.e2e


# MMEngine's compile wraps train_step in torch.compile; inductor compiles forward and backward of
# the whole detector for minutes on this CPU, so this runs only on request (docs/deployment.md).
# dynamic=False: with automatic dynamic shapes the second iteration's recompilation did not end in
# 16 minutes on 2 cores; static recompiles take 2-3 minutes.
@pytest.mark.skipif(os.environ.get('MMHVIT_TEST_COMPILE') != '1',
                    reason='inductor takes minutes per model: set MMHVIT_TEST_COMPILE=1')
def test_compile_true_trains_the_quickstart_detector(tiny_shapes, tmp_path):
    work_dir = tmp_path / 'work'
    out = run_tool('tools/train.py', DETECTOR_CONFIGS['retinanet'], '--work-dir', str(work_dir),
                   '--cfg-options', 'compile.dynamic=False', *short_run_options(tiny_shapes),
                   timeout=3600)
    assert 'Model has been "compiled"' in out
    scalars, = glob.glob(str(work_dir / '*' / 'vis_data' / 'scalars.json'))
    steps = [json.loads(line) for line in open(scalars) if '"loss"' in line]
    assert len(steps) >= 3  # 8 training images (those with boxes), batch 2
    assert all(torch.isfinite(torch.tensor(step['loss'])) for step in steps)


def test_runner_formats_its_config_text_once(monkeypatch):
    """MMEngine's runner reads ``cfg.pretty_text`` several times a run; build_runner's config
    runs yapf once per content and gives MMEngine's text."""
    import mmengine.config.config as config_module
    from mmengine.config import Config

    from mmhvit.utils.launch import _FormatOnceConfig
    calls = []
    format_code = config_module.FormatCode
    monkeypatch.setattr(config_module, 'FormatCode',
                        lambda text, **style: calls.append(text) or format_code(text, **style))
    cfg = Config(dict(model=dict(type='RetinaNet', depth=18), work_dir='/tmp/unused'))
    expected = cfg.pretty_text
    once = _FormatOnceConfig.of(copy.deepcopy(cfg))
    assert [once.pretty_text, copy.deepcopy(once).pretty_text] == [expected, expected]
    assert len(calls) == 2  # Config's own, then one for the two copies of the same content
    once.model.depth = 50
    assert once.pretty_text == Config(once.to_dict()).pretty_text and 'depth=50' in once.pretty_text
    assert type(copy.deepcopy(once)) is _FormatOnceConfig  # what MMEngine's Runner keeps


def test_compile_config_gets_the_eager_optimizer_step_hook():
    from mmengine.config import Config
    from mmengine.optim import OptimWrapper

    from mmhvit.engine import EagerOptimizerStepHook
    from mmhvit.utils.launch import prepare_runner_config
    cfg = prepare_runner_config(Config(dict(compile=True)), 'none', '/tmp/unused')
    assert cfg.custom_hooks == [dict(type='EagerOptimizerStepHook')]
    assert 'custom_hooks' not in prepare_runner_config(Config(dict()), 'none', '/tmp/unused')

    # Under torch.compile (the cheap 'eager' backend: dynamo traces, nothing is compiled) the
    # wrapped step still runs and updates the weights.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optim_wrapper = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=0.1))
    EagerOptimizerStepHook().before_train(type('Runner', (), dict(optim_wrapper=optim_wrapper)))

    def train_step(x):
        loss = model(x).square().mean()
        optim_wrapper.update_params(loss)
        return loss

    before = model.weight.detach().clone()
    loss = torch.compile(train_step, backend='eager')(torch.randn(3, 4))
    assert torch.isfinite(loss) and not torch.equal(model.weight, before)


RANK_END = '''
import logging, os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from mmhvit.utils import close_process_group, exit_rank
assert close_process_group() is False  # no group: nothing to close
os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=sys.argv[1], RANK='0', WORLD_SIZE='1')
dist.init_process_group('gloo')
model = DistributedDataParallel(torch.nn.Linear(2, 2))
model(torch.ones(1, 2)).sum().backward()
del model
assert close_process_group() is True and not dist.is_initialized()
logging.basicConfig(filename=sys.argv[2], level=logging.INFO)
logging.getLogger().info('logged last')
print('printed last', end='')  # block-buffered into a pipe: lost unless exit_rank flushes
exit_rank(3)
print('never')
'''


def test_a_rank_closes_its_group_and_exits_with_its_output_flushed(tmp_path):
    log = tmp_path / 'rank.log'
    result = subprocess.run([sys.executable, '-c', RANK_END, str(free_port()), str(log)],
                            capture_output=True, text=True, timeout=120,
                            env={**{k: v for k, v in os.environ.items() if k != 'PYTHONUNBUFFERED'},
                                 'PYTHONPATH': REPO})
    assert result.returncode == 3, result.stderr
    assert result.stdout == 'printed last'
    assert 'logged last' in log.read_text()
