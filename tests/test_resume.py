"""The RetinaNet quickstart run of tools/train.py: killed with SIGKILL mid-epoch it resumes with
nothing lost or repeated; tools/test.py and plot_loss.py on it, as a user runs them; CPU AMP."""
import glob
import json
import os
import os.path as osp
import pickle
import signal
import subprocess
import sys

import pytest
import torch
from conftest import DETECTOR_CONFIGS, REPO, run_tool, short_run_options, training_scalars

from mmhvit.models.checkpoint import load_checkpoint_file

pytestmark = pytest.mark.e2e

ITERS_PER_EPOCH = 4  # 8 generated training scenes, batch 2
EPOCHS = 2


def resumable_run_options(data_root, epochs=EPOCHS):
    """--cfg-options of a detector run that checkpoints mid-epoch: ``epochs`` epochs of 4
    iterations, a checkpoint every 2 (all kept), one data worker (the augmentation draws happen in
    a worker process, as in real training)."""
    return short_run_options(data_root, epochs=epochs) + [
        'default_hooks.checkpoint.interval=2', 'default_hooks.checkpoint.max_keep_ckpts=10',
        'train_dataloader.num_workers=1']


@pytest.fixture(scope='module')
def trained_retinanet(tiny_shapes, tmp_path_factory):
    """The RetinaNet quickstart config trained by tools/train.py as a user runs it, with
    :func:`resumable_run_options`: its work dir (the straight run a killed one is compared with)."""
    work_dir = tmp_path_factory.mktemp('retinanet') / 'work'
    run_tool('tools/train.py', DETECTOR_CONFIGS['retinanet'], '--work-dir', str(work_dir),
             '--cfg-options', *resumable_run_options(tiny_shapes))
    return work_dir


def train(config, work_dir, *extra, check=True):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, osp.join(REPO, 'tests')]))
    proc = subprocess.run([sys.executable, 'tools/train.py', config, '--work-dir', str(work_dir),
                           *extra], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stdout[-3000:] + proc.stderr[-6000:])
    return proc


def test_killed_run_resumes_exactly(trained_retinanet, tiny_shapes, tmp_path):
    # Two epochs of 4 iterations, a checkpoint every 2, one data worker; drop path on (random).
    # The straight run is trained_retinanet.
    options = resumable_run_options(tiny_shapes, epochs=EPOCHS)
    base = DETECTOR_CONFIGS['retinanet']
    killed_cfg = tmp_path / 'killed.py'
    killed_cfg.write_text(
        f'_base_ = {osp.join(REPO, base)!r}\n'
        "custom_imports = dict(imports=['mmhvit', 'reliability_hooks'], "
        'allow_failed_imports=False)\n'
        "custom_hooks = [dict(type='KillAfterIterHook', after_iter=3)]\n")

    killed = train(str(killed_cfg), tmp_path / 'resumed', '--cfg-options', *options, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    logged_before_kill = training_scalars(tmp_path / 'resumed')
    assert [r['iter'] for r in logged_before_kill] == [1, 2, 3]
    assert osp.basename(open(tmp_path / 'resumed' / 'last_checkpoint').read().strip()) == \
        'iter_2.pth'

    # Resume the same config without the kill hook: from iter_2.pth, mid-epoch 1.
    resumed = train(base, tmp_path / 'resumed', '--resume', '--cfg-options', *options)
    assert 'skipped the 2 batches of epoch 1' in resumed.stdout + resumed.stderr
    straight = {r['iter']: r for r in training_scalars(trained_retinanet)}
    after = training_scalars(tmp_path / 'resumed')[len(logged_before_kill):]
    # Iteration 3 is trained again (it was after the last checkpoint); nothing else repeats or is
    # skipped, and the counters continue.
    assert [r['iter'] for r in after] == list(range(3, EPOCHS * ITERS_PER_EPOCH + 1))
    assert [r['epoch'] for r in after] == [straight[r['iter']]['epoch'] for r in after]
    for record in after:
        reference = straight[record['iter']]
        for key in ('loss', 'loss_cls', 'loss_bbox', 'lr'):
            assert record[key] == pytest.approx(reference[key], rel=1e-5, abs=1e-5), \
                (record['iter'], key, record[key], reference[key])

    final = {}
    for name, work_dir in (('straight', trained_retinanet), ('resumed', tmp_path / 'resumed')):
        path = open(work_dir / 'last_checkpoint').read().strip()
        final[name] = load_checkpoint_file(path)
        assert final[name]['meta']['iter'] == EPOCHS * ITERS_PER_EPOCH
        # an iteration checkpoint names the epoch in progress (MMEngine): the last, 0-based
        assert final[name]['meta']['epoch'] == EPOCHS - 1
    for key, value in final['straight']['state_dict'].items():
        torch.testing.assert_close(final['resumed']['state_dict'][key], value, rtol=1e-5,
                                   atol=1e-5)
    straight_adam = final['straight']['optimizer']['state']
    resumed_adam = final['resumed']['optimizer']['state']
    assert straight_adam.keys() == resumed_adam.keys()
    for index, state in straight_adam.items():
        assert resumed_adam[index]['step'] == state['step']
        torch.testing.assert_close(resumed_adam[index]['exp_avg'], state['exp_avg'], rtol=1e-4,
                                   atol=1e-6)
    assert final['resumed']['param_schedulers'] == final['straight']['param_schedulers']


def test_amp_training_step_on_cpu_is_finite(tiny_shapes, tmp_path):
    """``--amp`` on a CPU trains in bfloat16 autocast (MMEngine's AMP wrapper needs a GPU)."""
    options = short_run_options(tiny_shapes) + ['train_cfg.max_epochs=1']
    proc = train(DETECTOR_CONFIGS['retinanet'], tmp_path / 'amp', '--amp', '--cfg-options',
                 *options)
    records = training_scalars(tmp_path / 'amp')
    assert len(records) == ITERS_PER_EPOCH
    assert all(torch.isfinite(torch.tensor([r['loss'] for r in records])))
    assert 'AnyDeviceAmpOptimWrapper' in open(
        glob.glob(str(tmp_path / 'amp' / '*' / '*.log'))[0]).read() + proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason='the CPU path of the wrapper')
def test_cpu_amp_wrapper_autocasts_to_bfloat16():
    from mmhvit.engine import AnyDeviceAmpOptimWrapper
    model = torch.nn.Linear(4, 4)
    wrapper = AnyDeviceAmpOptimWrapper(optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with wrapper.optim_context(model):
        out = model(torch.randn(2, 4))
    assert out.dtype == torch.bfloat16
    before = model.weight.detach().clone()
    wrapper.update_params(out.float().sum())
    assert not torch.equal(model.weight, before)  # stepped, without a loss scaler
    assert 'loss_scaler' in wrapper.state_dict()
    with pytest.raises(ValueError, match='bfloat16'):
        AnyDeviceAmpOptimWrapper(optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                 dtype='float16')


def test_test_tool_evaluates_draws_and_dumps_a_trained_run(trained_retinanet, tiny_shapes,
                                                           tmp_path):
    """tools/test.py and plot_loss.py in subprocesses, as a user runs them, on the RetinaNet run
    tools/train.py trained (every quickstart config also trains and tests in
    test_quickstart.py, in process)."""
    checkpoint = open(trained_retinanet / 'last_checkpoint').read().strip()
    assert osp.isfile(checkpoint)
    work_dir = tmp_path / 'work'
    metrics_file = tmp_path / 'metrics.json'
    # a model trained for a few steps scores below the default threshold: keep every box
    out = run_tool('tools/test.py', DETECTOR_CONFIGS['retinanet'], checkpoint, '--work-dir',
                   str(work_dir), '--show-dir', 'vis', '--out', str(tmp_path / 'preds.pkl'),
                   '--metrics-out', str(metrics_file), '--cfg-options',
                   *short_run_options(tiny_shapes), 'model.test_cfg.score_thr=0.0')
    metrics = json.loads(metrics_file.read_text())
    for key in ('coco/bbox_mAP', 'coco/bbox_mAP_50'):
        assert key in metrics and 0 <= metrics[key] <= 1, (key, metrics)
        assert key in out
    predictions = pickle.load(open(tmp_path / 'preds.pkl', 'rb'))
    assert len(predictions) == 4 and all('pred_instances' in p for p in predictions)
    assert len(glob.glob(str(work_dir / '*' / 'vis' / '*.png'))) == 4  # one per val image
    run_tool('tools/analysis_tools/plot_loss.py', str(trained_retinanet), '--out',
             str(tmp_path / 'l.png'))
    assert osp.getsize(tmp_path / 'l.png') > 0
