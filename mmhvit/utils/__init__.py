from .launch import prepare_runner_config, trust_local_training_checkpoints

__all__ = ['prepare_runner_config', 'trust_local_training_checkpoints']
from .flops import count_flops, count_params  # noqa: E402

__all__ += ['count_flops', 'count_params']
