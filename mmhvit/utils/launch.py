"""What tools/train.py and tools/test.py share: one config, any OpenMMLab task, GPU or CPU ranks."""
import gc
import logging
import os
import os.path as osp
import subprocess
import sys

import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.dist import broadcast
from mmengine.model import is_model_wrapper
from mmengine.registry import RUNNERS
from mmengine.runner import FlexibleRunner, Runner

from ..models.checkpoint import load_checkpoint_file, training_checkpoint_globals

# Variables that srun sets for each task it starts (srun's manual, OUTPUT ENVIRONMENT VARIABLES)
SLURM_TASK_VARIABLES = ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_LOCALID', 'SLURM_NODELIST')
DEFAULT_MASTER_PORT = '29500'  # torch.distributed's, as MMEngine's Slurm launcher uses


def first_slurm_host(node_list: str) -> str:
    """The first host of a Slurm node list (``node-[0-3]`` -> ``node-0``), by ``scontrol``."""
    command = ['scontrol', 'show', 'hostname', node_list]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        raise RuntimeError(f'launcher "slurm": cannot run `{" ".join(command)}` to find the '
                           f'master host ({error}); set MASTER_ADDR to its address') from None
    hosts = result.stdout.split()
    if result.returncode != 0 or not hosts:
        detail = result.stderr.strip() or 'no host printed'
        raise RuntimeError(f'launcher "slurm": `{" ".join(command)}` failed ({detail}); set '
                           'MASTER_ADDR to the address of the first node')
    return hosts[0]


def init_slurm_process_group(backend: str = 'gloo') -> None:
    """Join the process group of an srun job, from the variables srun gives each task.

    Sets up the environment as MMEngine's Slurm launcher does: RANK, WORLD_SIZE and LOCAL_RANK
    from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID; MASTER_ADDR, unless already set, the first
    host of SLURM_NODELIST; MASTER_PORT, unless already set, 29500. Unlike MMEngine's launcher it
    does not select a CUDA device, which fails on a machine without a GPU.

    Raises:
        RuntimeError: a variable of srun is missing or not a number, or the master host cannot
            be found.
    """
    missing = [name for name in SLURM_TASK_VARIABLES if name not in os.environ]
    if missing:
        raise RuntimeError(f'launcher "slurm" needs the variables srun gives each task; '
                           f'{", ".join(missing)} not set (start it with tools/slurm_train.sh, '
                           'tools/slurm_test.sh or srun)')
    ranks = {}
    for name, variable in (('RANK', 'SLURM_PROCID'), ('WORLD_SIZE', 'SLURM_NTASKS'),
                           ('LOCAL_RANK', 'SLURM_LOCALID')):
        value = os.environ[variable]
        if not value.isdigit():
            raise RuntimeError(f'launcher "slurm": {variable}={value!r} is not a task number')
        ranks[name] = str(int(value))
    master_addr = os.environ.get('MASTER_ADDR') or first_slurm_host(os.environ['SLURM_NODELIST'])
    os.environ.update(MASTER_ADDR=master_addr,
                      MASTER_PORT=os.environ.get('MASTER_PORT', DEFAULT_MASTER_PORT), **ranks)
    dist.init_process_group(backend=backend)


def _init_cpu_process_group(launcher: str) -> None:
    """Start a gloo process group from torchrun's (``pytorch``) or srun's (``slurm``) environment.

    MMEngine 0.10.7's launchers always call ``torch.cuda.set_device`` and so fail on a machine
    without a GPU; a group that already exists makes the Runner skip its own ``init_dist``.
    """
    if dist.is_initialized():
        return
    if launcher == 'slurm':
        init_slurm_process_group('gloo')
    else:
        dist.init_process_group(backend='gloo')


def close_process_group() -> bool:
    """End a distributed run on every rank together; returns whether there was a group to close.

    Call it once the caller has dropped its runner: collecting the DDP wrapper first frees its
    reducer's hold on the group while the group and the interpreter are alive.
    """
    if not dist.is_initialized():
        return False
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return True


def exit_rank(status: int = 0) -> None:
    """Leave a finished rank's process at once, its output flushed.

    A rank left to interpreter finalization now and then aborts after its work is done
    ("terminate called without an active exception", SIGABRT: C++ objects of the torch.distributed
    stack torn down with the interpreter), which fails a run that has trained and saved everything.
    Only for a script's ``__main__``: it ends the calling process.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def prepare_runner_config(cfg: Config, launcher: str, work_dir: str = None,
                          config_path: str = None) -> Config:
    """Fill in what the command line decides: launcher, work dir, CPU data parallelism."""
    cfg.launcher = launcher
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        name = osp.splitext(osp.basename(config_path))[0] if config_path else 'run'
        cfg.work_dir = osp.join('./work_dirs', name)
    fsdp = _check_fsdp(cfg, launcher)
    if launcher != 'none' and not torch.cuda.is_available():
        if launcher not in ('pytorch', 'slurm'):
            raise ValueError(f'launcher "{launcher}" needs GPUs; on a CPU-only machine use '
                             'tools/dist_train.sh (torchrun, launcher pytorch) or slurm')
        _init_cpu_process_group(launcher)
        cfg.env_cfg = dict(cfg.get('env_cfg', {}), dist_cfg=dict(backend='gloo'))
        if fsdp:
            # FSDP's default device_id is LOCAL_RANK, a CUDA device; torch's FSDP runs on the CPU
            # when given the CPU explicitly.
            wrapper = dict(cfg.strategy.get('model_wrapper') or {})
            wrapper.setdefault('device_id', 'cpu')
            cfg.strategy.model_wrapper = wrapper
        else:
            # CPU modules reject DDP's device_ids=[LOCAL_RANK].
            wrapper = dict(cfg.get('model_wrapper_cfg') or dict(type='MMDistributedDataParallel'))
            wrapper['device_ids'] = None
            wrapper.setdefault('broadcast_buffers', False)
            wrapper.setdefault('find_unused_parameters', cfg.get('find_unused_parameters', False))
            cfg.model_wrapper_cfg = wrapper
    if isinstance(cfg.get('visualizer'), dict):
        # OpenMMLab bases name their visualizer 'visualizer'; MMEngine keeps one instance per name
        # for the whole process and hooks take the latest created one, so a second run in one
        # process (tests, notebooks, the demo's inferencers before it) would get another task's.
        # Without a name the run's own experiment name is used.
        cfg.visualizer.pop('name', None)
    if cfg.get('compile'):
        # torch.compile of MMEngine's train_step cannot trace the optimizer (mmhvit.engine.compile)
        hooks = cfg.get('custom_hooks') or []
        if not any(h.get('type') in ('EagerOptimizerStepHook', 'mmhvit.EagerOptimizerStepHook')
                   for h in hooks):
            cfg.custom_hooks = [*hooks, dict(type='EagerOptimizerStepHook')]
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = '0'
    return cfg


def _check_fsdp(cfg: Config, launcher: str) -> bool:
    """Whether the config trains under ``FSDPStrategy``; refuses what FSDP cannot do right."""
    strategy = cfg.get('strategy')
    if not isinstance(strategy, dict) or 'FSDP' not in str(strategy.get('type', '')):
        return False
    if launcher == 'none':
        raise ValueError('FSDPStrategy shards over ranks: launch with tools/dist_train.sh or '
                           'tools/slurm_train.sh')
    clip_grad = (cfg.get('optim_wrapper') or {}).get('clip_grad')
    if clip_grad and clip_grad.get('type', 'norm') == 'norm':
        # OptimWrapper clips with torch.nn.utils.clip_grad_norm_ over each rank's own shards,
        # i.e. by a per-rank norm: ranks would clip differently.
        raise ValueError('optim_wrapper.clip_grad by norm is wrong under FSDP (each rank would '
                           'clip by the norm of its own shard); set clip_grad=None')
    return True


class _FormatOnceConfig(Config):
    """A :class:`~mmengine.config.Config` that formats its text with yapf once per content.

    MMEngine's runner reads ``pretty_text`` to log the environment, to dump the config, for the
    visualizer, for the runtime-info hook and with every checkpoint it saves: each a yapf pass of
    about 1.3 s on a quickstart config (2-core CPU), most of a short run's start-up. The text
    depends only on the config's content, so equal contents share one formatting.
    """
    _texts: dict = {}  # repr of the content -> its formatted text

    @property
    def pretty_text(self) -> str:
        key = repr(self.to_dict())
        if key not in self._texts:
            if len(self._texts) >= 8:  # a process runs a handful of configs: keep it small
                self._texts.clear()
            self._texts[key] = super().pretty_text
        return self._texts[key]

    @classmethod
    def of(cls, cfg: Config) -> '_FormatOnceConfig':
        """``cfg``'s content (shared, not copied) in this class."""
        formatted_once = cls.__new__(cls)
        formatted_once.__setstate__(cfg.__getstate__())  # Config's own pickling protocol
        return formatted_once


def build_runner(cfg: Config):
    """The runner the config asks for, ready to load training checkpoints.

    ``runner_type`` builds that runner; a ``strategy`` (e.g. ``configs/_fsdp.py``) MMEngine's
    ``FlexibleRunner``; otherwise the plain ``Runner``.

    Args:
        cfg (Config): The config, after :func:`prepare_runner_config`.

    Returns:
        Runner | FlexibleRunner: The runner, with :func:`allow_training_checkpoints` applied.
    """
    cfg = _FormatOnceConfig.of(cfg)
    if 'runner_type' in cfg:
        runner = RUNNERS.build(cfg)
    elif cfg.get('strategy') is not None:
        runner = FlexibleRunner.from_cfg(cfg)
    else:
        runner = Runner.from_cfg(cfg)
    allow_training_checkpoints(runner)
    return runner


def init_model_weights(runner) -> None:
    """Initialise the runner's model as ``runner.train()`` does before its first iteration.

    The model's ``init_weights`` (its ``init_cfg``: pretrained weights included), then every rank
    takes rank 0's values. For tools that use a freshly built model without training it (gradient
    diagnostics, an untrained baseline).
    """
    model = runner.model.module if is_model_wrapper(runner.model) else runner.model
    if hasattr(model, 'init_weights'):
        model.init_weights()
        for tensor in model.state_dict().values():
            broadcast(tensor)  # nothing to do without a process group


def allow_training_checkpoints(runner) -> None:
    """Let the runner resume from / test MMEngine training checkpoints, still weights-only.

    Training checkpoints pickle MMEngine's HistoryBuffer and numpy arrays (and the official
    scripts' an ``argparse.Namespace``), which torch.load's default ``weights_only=True`` refuses.
    During the runner's ``load_or_resume`` step exactly those types are allowlisted
    (:func:`mmhvit.models.checkpoint.training_checkpoint_globals`); nothing is ever fully
    unpickled, so a released file given to tools/test.py cannot run code. URLs go through
    :func:`mmhvit.models.checkpoint.load_from_http_weights_only` (registered on import). When
    loading fails, the file is read again by
    :func:`~mmhvit.models.checkpoint.load_checkpoint_file`, whose error says what is wrong with it
    (missing, empty, truncated, not a checkpoint, pickling code) in one line.
    """
    original = runner.load_or_resume

    def load_or_resume():
        with training_checkpoint_globals():
            try:
                return original()
            except Exception:
                # what the runner was built with: None when resuming from the latest in work_dir
                checkpoint = runner.cfg.get('load_from')
                if checkpoint and '://' not in str(checkpoint):
                    load_checkpoint_file(checkpoint)  # raises the file's own error, if any
                raise

    runner.load_or_resume = load_or_resume
