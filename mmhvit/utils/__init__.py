from .cli_errors import add_debug_argument, reports_user_errors
from .launch import allow_training_checkpoints, build_runner, prepare_runner_config

__all__ = [
    'prepare_runner_config', 'allow_training_checkpoints', 'build_runner', 'add_debug_argument',
    'reports_user_errors'
]
from .flops import count_flops, count_params  # noqa: E402

__all__ += ['count_flops', 'count_params']
