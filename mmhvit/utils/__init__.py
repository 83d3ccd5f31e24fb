from .launch import prepare_runner_config

__all__ = ['prepare_runner_config']
from .flops import count_flops, count_params  # noqa: E402

__all__ += ['count_flops', 'count_params']
