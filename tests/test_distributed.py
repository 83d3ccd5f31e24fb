"""Beyond one process, on CPU gloo ranks: two "nodes" of tools/dist_train.sh, the Slurm scripts
through a stand-in srun, resume on another number of ranks, FSDP (FlexibleRunner) and gradient
accumulation. docs/distributed.md tells what each proves.

The classifier runs share one tiny setup (NesT-q, 8 crops of 64 px, batch 2 per rank, 2 epochs,
a checkpoint every iteration, epoch-based schedules, no validation) and are run once per module:
1 rank (plain Runner) -> its last checkpoint is the start of 2 ranks through slurm_train.sh and of
2 FSDP ranks; the 1- and 2-rank runs' mid-epoch checkpoints resume on 2 and 1 ranks.
"""
import copy
import glob
import json
import os
import os.path as osp
import stat
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import DETECTOR_CONFIGS, REPO, free_port, short_run_options, training_scalars

from mmhvit.testing import TINY_ARCHS

pytestmark = pytest.mark.e2e

CLASSIFIER = 'configs/quickstart/classifier_nest-q_20e_shapes.py'
EPOCHS, IMAGES, PER_RANK = 2, 8, 2


def launch(args, env=None, timeout=600):
    """Start a repository tool (a bash script or a Python file); the process, not waited for."""
    # PYTHONFAULTHANDLER: a rank that aborts prints where (its Python stack) into the output.
    env = dict(os.environ, **(env or {}), PYTHON=sys.executable, OMP_NUM_THREADS='1',
               PYTHONFAULTHANDLER='1',
               PYTHONPATH=os.pathsep.join([REPO, osp.join(REPO, 'tests')]))
    command = ['bash', *args] if args[0].endswith('.sh') else [sys.executable, *args]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc, timeout=600):
    output, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, output[-6000:]
    return output


def run(args, env=None):
    return finish(launch(args, env))


def batches(work_dir):
    """{(iteration from 0, rank): the record of RecordBatchesHook}, over every run in the dir."""
    out = {}
    for path in glob.glob(str(work_dir / 'batches_rank*.jsonl')):
        rank = int(osp.basename(path)[len('batches_rank'):-len('.jsonl')])
        for line in open(path):
            record = json.loads(line)
            out[record['iter'], rank] = record
    return out


def lrs(work_dir):
    """{iteration from 1: lr} of every logged training record in the dir."""
    return {r['iter']: r['lr'] for r in training_scalars(work_dir)}


def checkpoint(work_dir, name=None):
    path = str(work_dir / name) if name else open(work_dir / 'last_checkpoint').read().strip()
    return torch.load(path, map_location='cpu', weights_only=False)


# ---------------------------------------------------------------------------------------------
# RetinaNet: two nodes of one rank equal one node of two ranks

@pytest.fixture(scope='module')
def one_node_two_ranks(tiny_shapes, tmp_path_factory):
    work_dir = tmp_path_factory.mktemp('one_node')
    output = run(['tools/dist_train.sh', DETECTOR_CONFIGS['retinanet'], '2', '--work-dir',
                  str(work_dir), '--cfg-options', *short_run_options(tiny_shapes)],
                 env=dict(PORT=str(free_port())))
    return work_dir, output


def test_dist_train_runs_two_cpu_ranks(one_node_two_ranks):
    work_dir, output = one_node_two_ranks
    assert 'Distributed training: True' in output
    log = open(glob.glob(str(work_dir / '*' / '*.log'))[0]).read()
    assert 'GPU number: 2' in log  # MMEngine's name for the world size
    # 8 images, 2 per rank: the sampler gives each of the 2 ranks 2 iterations (4 on one rank)
    assert 'Epoch(train) [1][2/2]' in log
    losses = [r['loss'] for r in training_scalars(work_dir)]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    state = checkpoint(work_dir)
    assert any(k.startswith('backbone.') for k in state['state_dict'])


def test_two_nodes_of_one_rank_equal_one_node_of_two(one_node_two_ranks, tiny_shapes, tmp_path,
                                                     capsys):
    """NNODES=2, NODE_RANK=0/1, MASTER_ADDR: what a user runs on each of two machines."""
    work_dir = tmp_path / 'two_nodes'
    port = str(free_port())
    nodes = [launch(['tools/dist_train.sh', DETECTOR_CONFIGS['retinanet'], '1', '--work-dir',
                     str(work_dir), '--cfg-options', *short_run_options(tiny_shapes)],
                    env=dict(NNODES='2', NODE_RANK=str(rank), MASTER_ADDR='127.0.0.1', PORT=port))
             for rank in (0, 1)]
    outputs = [finish(node) for node in nodes]
    assert 'GPU number: 2' in outputs[0]
    one_node = training_scalars(one_node_two_ranks[0])
    two_nodes = training_scalars(work_dir)
    assert [r['iter'] for r in two_nodes] == [r['iter'] for r in one_node] == [1, 2]
    diff = max(abs(a[k] - b[k]) for a, b in zip(two_nodes, one_node)
               for k in ('loss', 'loss_cls', 'loss_bbox'))
    with capsys.disabled():
        print(f'\n[distributed] RetinaNet, 2 nodes x 1 rank vs 1 node x 2 ranks: max |loss diff| '
              f'{diff:.1e}')
    for a, b in zip(two_nodes, one_node):
        for key in ('loss', 'loss_cls', 'loss_bbox'):
            assert a[key] == pytest.approx(b[key], rel=1e-6), (a['iter'], key)


# ---------------------------------------------------------------------------------------------
# The classifier runs: Slurm, resume on another number of ranks, FSDP

STAND_IN_SRUN = '''#!{python}
"""A stand-in srun: records its arguments and environment, runs --ntasks copies of the command
here with the variables Slurm gives each task."""
import json, os, subprocess, sys
args = sys.argv[1:]
options, i = {{}}, 0
while args[i].startswith('-'):
    if '=' in args[i]:
        key, value = args[i].split('=', 1)
    else:
        key, value = args[i], args[i + 1]
        i += 1
    options[key] = value
    i += 1
command = args[i:]
with open(os.environ['SRUN_RECORD'], 'a') as f:
    f.write(json.dumps(dict(options=options, command=command, env=dict(os.environ))) + '\\n')
ntasks, per_node = int(options['--ntasks']), int(options['--ntasks-per-node'])
tasks = [subprocess.Popen(command, env=dict(
    os.environ, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank % per_node),
    SLURM_NTASKS=str(ntasks), SLURM_NODELIST='node-[0-{{}}]'.format(max(ntasks // per_node - 1, 0)),
    SLURM_JOB_NAME=options['--job-name'])) for rank in range(ntasks)]
sys.exit(max(task.wait() for task in tasks))
'''
# `scontrol show hostname NODELIST`: the first node is this machine
STAND_IN_SCONTROL = '#!/usr/bin/env bash\necho 127.0.0.1\n'


@pytest.fixture(scope='module')
def slurm_bin(tmp_path_factory):
    bin_dir = tmp_path_factory.mktemp('slurm_bin')
    for name, text in (('srun', STAND_IN_SRUN.format(python=sys.executable)),
                       ('scontrol', STAND_IN_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return bin_dir


def slurm_env(slurm_bin, record):
    return dict(PATH=f'{slurm_bin}{os.pathsep}{os.environ["PATH"]}', SRUN_RECORD=str(record),
                MASTER_PORT=str(free_port()), GPUS='2', GPUS_PER_NODE='2', CPUS_PER_TASK='1',
                SRUN_ARGS='--time=5')


@pytest.fixture(scope='module')
def classifier_config(tiny_shapes, tmp_path_factory):
    root = str(tiny_shapes / 'crops') + '/'
    path = tmp_path_factory.mktemp('config') / 'classifier.py'
    path.write_text(textwrap.dedent(f'''\
        _base_ = [{osp.join(REPO, CLASSIFIER)!r}]
        custom_imports = dict(imports=['mmhvit', 'reliability_hooks'],
                              allow_failed_imports=False)
        custom_hooks = [dict(type='RecordBatchesHook')]
        pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=(64, 64)),
                    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
                    dict(type='PackInputs')]
        train_dataloader = dict(batch_size={PER_RANK}, num_workers=0, persistent_workers=False,
                                dataset=dict(data_root={root!r}, indices={IMAGES},
                                             pipeline=pipeline))
        test_dataloader = dict(num_workers=0, persistent_workers=False,
                               dataset=dict(data_root={root!r}, indices=4, pipeline=[
                                   dict(type='LoadImageFromFile'),
                                   dict(type='Resize', scale=(64, 64)),
                                   dict(type='PackInputs')]))
        val_dataloader = None
        val_cfg = None
        val_evaluator = None
        train_cfg = dict(max_epochs={EPOCHS})
        optim_wrapper = dict(clip_grad=None)  # FSDP: no clipping by norm
        # epoch-based schedules, stepped per iteration (what moves with a change of ranks)
        param_scheduler = [
            dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=1,
                 convert_to_iter_based=True),
            dict(type='CosineAnnealingLR', eta_min=0., by_epoch=True, begin=1, end={EPOCHS},
                 convert_to_iter_based=True)]
        default_hooks = dict(logger=dict(interval=1),
                             checkpoint=dict(interval=1, max_keep_ckpts=20))
        '''))
    return str(path)


@pytest.fixture(scope='module')
def classifier_runs(classifier_config, slurm_bin, tmp_path_factory):
    """{name: work dir}: 'one' (1 rank), 'slurm' (2 ranks through slurm_train.sh, starting from
    'one''s last checkpoint), 'fsdp' (2 FSDP ranks from the same) and the srun record."""
    base = tmp_path_factory.mktemp('classifier')
    dirs = {name: base / name for name in ('one', 'slurm', 'fsdp')}
    run(['tools/train.py', classifier_config, '--work-dir', str(dirs['one'])])
    start = open(dirs['one'] / 'last_checkpoint').read().strip()
    fsdp_config = base / 'fsdp.py'
    fsdp_config.write_text(
        f"_base_ = [{classifier_config!r}, {osp.join(REPO, 'configs', '_fsdp.py')!r}]\n"
        "strategy = dict(model_wrapper=dict(auto_wrap_policy=dict(family='NesT')))\n")
    record = base / 'srun.jsonl'
    slurm = launch(['tools/slurm_train.sh', 'cpu', 'hvit', classifier_config, str(dirs['slurm']),
                    '--cfg-options', f'load_from={start}'], env=slurm_env(slurm_bin, record))
    finish(slurm)
    run(['tools/dist_train.sh', str(fsdp_config), '2', '--work-dir', str(dirs['fsdp']),
         '--cfg-options', f'load_from={start}'], env=dict(PORT=str(free_port())))
    dirs['record'] = record
    dirs['start'] = start
    return dirs


def test_slurm_scripts_through_a_stand_in_srun(classifier_runs, classifier_config, slurm_bin,
                                               tmp_path):
    (call, ) = [json.loads(line) for line in open(classifier_runs['record'])]
    assert call['options'] == {'-p': 'cpu', '--job-name': 'hvit', '--gres': 'gpu:2',
                               '--ntasks': '2', '--ntasks-per-node': '2', '--cpus-per-task': '1',
                               '--kill-on-bad-exit': '1', '--time': '5'}
    assert call['command'] == [
        sys.executable, '-u', 'tools/train.py', classifier_config,
        f"--work-dir={classifier_runs['slurm']}", '--launcher=slurm', '--cfg-options',
        f"load_from={classifier_runs['start']}"]
    # the scripts put the repository first on the path of the tasks
    assert call['env']['PYTHONPATH'].split(os.pathsep)[0] == 'tools/..'
    log = open(glob.glob(str(classifier_runs['slurm'] / '*' / '*.log'))[0]).read()
    assert 'GPU number: 2' in log  # two tasks made one process group
    records = batches(classifier_runs['slurm'])
    assert {rank for _, rank in records} == {0, 1}
    assert len(records) == 2 * EPOCHS * IMAGES // (2 * PER_RANK)

    record = tmp_path / 'srun.jsonl'
    metrics = tmp_path / 'metrics.json'
    finish(launch(['tools/slurm_test.sh', 'cpu', 'hvit-test', classifier_config,
                   open(classifier_runs['slurm'] / 'last_checkpoint').read().strip(),
                   '--work-dir', str(tmp_path / 'test'), '--metrics-out', str(metrics)],
                  env=slurm_env(slurm_bin, record)))
    (call, ) = [json.loads(line) for line in open(record)]
    assert call['command'][2:4] == ['tools/test.py', classifier_config]
    assert '--launcher=slurm' in call['command'] and call['options']['--ntasks'] == '2'
    assert 0 <= json.loads(metrics.read_text())['accuracy/top1'] <= 100


def order(records, iters, ranks):
    """The images of the given iterations in the sampler's order (rank r takes every r-th)."""
    out = []
    for it in iters:
        per_rank = [records[it, r]['samples'] for r in range(ranks)]
        out += [s for group in zip(*per_rank) for s in group]
    return out


@pytest.mark.parametrize('ranks_before,ranks_after', [(2, 1), (1, 2)])
def test_resume_on_another_number_of_ranks(classifier_runs, classifier_config, ranks_before,
                                           ranks_after, tmp_path):
    """A mid-epoch checkpoint of one run continues on the other's ranks as that run would."""
    before = classifier_runs['slurm' if ranks_before == 2 else 'one']
    after = classifier_runs['slurm' if ranks_after == 2 else 'one']  # the straight reference
    # half of epoch 1: 4 images, iteration 1 on 2 ranks, 2 on 1 rank
    ckpt_iter = IMAGES // 2 // (PER_RANK * ranks_before)
    resumed = tmp_path / 'resumed'
    command = [classifier_config, '--work-dir', str(resumed), '--resume',
               str(before / f'iter_{ckpt_iter}.pth')]
    if ranks_after == 2:
        output = run(['tools/dist_train.sh', command[0], '2', *command[1:]],
                     env=dict(PORT=str(free_port())))
    else:
        output = run(['tools/train.py', *command])
    new_iter = IMAGES // 2 // (PER_RANK * ranks_after)
    assert f'iteration {ckpt_iter} of the checkpoint is {new_iter} here' in output
    iters_per_epoch = IMAGES // (PER_RANK * ranks_after)
    total = EPOCHS * iters_per_epoch
    got, reference = batches(resumed), batches(after)
    assert sorted({it for it, _ in got}) == list(range(new_iter, total))
    # the same images in the same order as the run that had these ranks from the start ...
    assert order(got, range(new_iter, total), ranks_after) == \
        order(reference, range(new_iter, total), ranks_after)
    # ... which with the images before the checkpoint make each epoch once
    first_half = order(batches(before), range(ckpt_iter), ranks_before)
    epoch_1 = first_half + order(got, range(new_iter, iters_per_epoch), ranks_after)
    assert sorted(epoch_1) == sorted(order(reference, range(iters_per_epoch), ranks_after))
    assert [got[it, 0]['epoch'] for it in range(new_iter, total)] == \
        [reference[it, 0]['epoch'] for it in range(new_iter, total)]
    # the epoch-based warm-up and cosine continue at the same point of the epoch
    resumed_lr, reference_lr = lrs(resumed), lrs(after)
    assert sorted(resumed_lr) == list(range(new_iter + 1, total + 1))
    for it, lr in resumed_lr.items():
        assert lr == pytest.approx(reference_lr[it], rel=1e-6, abs=1e-12), it
    final = checkpoint(resumed)
    assert final['meta']['iter'] == total
    assert final['data_position'] == dict(iters_per_epoch=iters_per_epoch,
                                          images_per_iter=PER_RANK * ranks_after)


def test_fsdp_trains_as_ddp_and_its_checkpoints_are_plain(classifier_runs, classifier_config,
                                                          capsys):
    fsdp, ddp = classifier_runs['fsdp'], classifier_runs['slurm']
    log = open(glob.glob(str(fsdp / '*' / '*.log'))[0]).read()
    assert 'GPU number: 2' in log
    records, ddp_records = batches(fsdp), batches(ddp)
    assert {r['model'] for r in records.values()} == {'MMFullyShardedDataParallel'}
    # each rank holds about half of the parameters (the blocks' and the root unit's shards)
    full = ddp_records[0, 0]['numel']
    assert records[0, 0]['numel'] + records[0, 1]['numel'] == full
    assert max(records[0, 0]['numel'], records[0, 1]['numel']) < 0.6 * full
    # Loaded from the plain 1-rank checkpoint, trained on the same batches: the same losses and
    # weights as DDP (NesT: LayerNorm only).
    fsdp_losses, ddp_losses = training_scalars(fsdp), training_scalars(ddp)
    assert len(fsdp_losses) == len(ddp_losses) == EPOCHS * IMAGES // (2 * PER_RANK)
    for a, b in zip(fsdp_losses, ddp_losses):
        assert a['loss'] == pytest.approx(b['loss'], rel=1e-5), a['iter']
    fsdp_ckpt, ddp_ckpt = checkpoint(fsdp), checkpoint(ddp)
    assert fsdp_ckpt['state_dict'].keys() == ddp_ckpt['state_dict'].keys()
    with capsys.disabled():
        loss_diff = max(abs(a['loss'] - b['loss']) / abs(b['loss'])
                        for a, b in zip(fsdp_losses, ddp_losses))
        weight_diff = max((fsdp_ckpt['state_dict'][k] - v).abs().max().item()
                          for k, v in ddp_ckpt['state_dict'].items())
        print(f'\n[distributed] NesT-q, FSDP vs DDP (2 ranks, {len(ddp_losses)} steps): max rel '
              f'loss diff {loss_diff:.1e}, max |weight diff| {weight_diff:.1e}; parameters per '
              f"rank {records[0, 0]['numel']} + {records[0, 1]['numel']} of {full}")
    for key, value in ddp_ckpt['state_dict'].items():
        torch.testing.assert_close(fsdp_ckpt['state_dict'][key], value, rtol=1e-4, atol=1e-6)

    # The FSDP checkpoint in a plain model: the Runner's loader and init_cfg Pretrained.
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from mmpretrain.registry import MODELS

    from mmhvit.models.checkpoint import training_checkpoint_globals
    init_default_scope('mmpretrain')
    cfg = Config.fromfile(classifier_config)
    path = open(fsdp / 'last_checkpoint').read().strip()
    model = MODELS.build(cfg.model)
    with training_checkpoint_globals():  # as tools/test.py and --resume load it
        load_checkpoint(model, path, strict=True)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, fsdp_ckpt['state_dict'][key], rtol=0, atol=0)
    backbone = MODELS.build(dict(cfg.model.backbone, init_cfg=dict(
        type='Pretrained', checkpoint=path, prefix='backbone.')))
    backbone.init_weights()
    for key, value in backbone.state_dict().items():
        torch.testing.assert_close(value, fsdp_ckpt['state_dict'][f'backbone.{key}'], rtol=0,
                                   atol=0)


@pytest.mark.parametrize('config', sorted(glob.glob(osp.join(REPO, 'configs', '*_fsdp_in1k.py'))),
                         ids=osp.basename)
def test_fsdp_config_wraps_every_block_of_its_large_variant(config):
    from mmengine.config import Config
    from mmengine.registry import FUNCTIONS, init_default_scope
    from mmpretrain.registry import MODELS

    import mmhvit  # noqa: F401
    cfg = Config.fromfile(config)
    assert cfg.strategy.type == 'FSDPStrategy' and cfg.strategy.state_dict_cfg == 'full'
    policy = dict(cfg.strategy.model_wrapper.auto_wrap_policy)
    init_default_scope('mmpretrain')
    with torch.device('meta'):  # 60-160 M parameters: no memory, no time
        model = MODELS.build(cfg.model)
    wrap = FUNCTIONS.get(policy.pop('type'))
    wrapped = [n for n, m in model.named_modules() if wrap(m, False, 0, **policy)]
    blocks = [f'backbone.stages.{i}.blocks.{j}' for i, stage in enumerate(model.backbone.stages)
              for j in range(len(stage.blocks))]
    assert wrapped == blocks
    params = sum(p.numel() for p in model.backbone.parameters()) / 1e6
    expected = {'nest_b': 67, 'tnt_b': 65, 'transcnn_l': 79, 'hatnet_l': 62, 'ptnt_b': 156}
    assert round(params) == expected[osp.basename(config)[:-len('_fsdp_in1k.py')]]
    with pytest.raises(ValueError, match='unknown family'):
        wrap(model.backbone, False, 0, family='Swin')


def test_fsdp_refuses_clipping_by_norm_and_a_single_process():
    from mmengine.config import Config

    from mmhvit.utils import prepare_runner_config
    cfg = Config(dict(strategy=dict(type='FSDPStrategy'),
                      optim_wrapper=dict(clip_grad=dict(max_norm=1.))))
    with pytest.raises(ValueError, match='clip_grad'):
        prepare_runner_config(copy.deepcopy(cfg), 'pytorch', '/tmp/unused')
    with pytest.raises(ValueError, match='dist_train.sh'):
        prepare_runner_config(cfg, 'none', '/tmp/unused')


# ---------------------------------------------------------------------------------------------
# Gradient accumulation

def test_two_accumulated_steps_of_two_equal_one_step_of_four(capsys):
    """``accumulative_counts=2``: batch 2 twice is one step of batch 4 (NesT: LayerNorm, no drop
    path). SGD, not Adam: Adam's normalised step would hide a gradient twice too large."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample
    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='ImageClassifier', backbone=dict(type='mmhvit.NesT', **TINY_ARCHS['NesT'],
                                              drop_path_rate=0., out_indices=(3, )),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=3, in_channels=64),
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=3)))
    model.init_weights()
    reference = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    images = [torch.randint(0, 256, (3, 40, 48), dtype=torch.uint8, generator=generator)
              for _ in range(4)]
    labels = [DataSample().set_gt_label(int(i)) for i in torch.randint(0, 3, (4, ))]

    def batch(part):
        return dict(inputs=images[part], data_samples=labels[part])

    def sgd(accumulative_counts):
        return dict(type='OptimWrapper', optimizer=dict(type='SGD', lr=0.5, momentum=0.9),
                    accumulative_counts=accumulative_counts)

    accumulated = build_optim_wrapper(model, sgd(2))
    accumulated.initialize_count_status(model, 0, 2)
    start = copy.deepcopy(model.state_dict())
    model.train_step(batch(slice(0, 2)), accumulated)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in start.items())  # no step yet
    model.train_step(batch(slice(2, 4)), accumulated)
    reference.train_step(batch(slice(0, 4)), build_optim_wrapper(reference, sgd(1)))
    diff = max((p - q).abs().max().item()
               for p, q in zip(model.parameters(), reference.parameters()))
    with capsys.disabled():
        print(f'\n[distributed] accumulation 2 x batch 2 vs batch 4 (SGD): max |weight diff| '
              f'{diff:.1e}')
    changed = 0
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
        changed += not torch.equal(p, start[name])
    assert changed == len(start) - sum(1 for k in start if 'running' in k)
