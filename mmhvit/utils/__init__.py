from .cli_errors import add_debug_argument, reports_user_errors
from .flops import count_flops, count_params
from .launch import (
    allow_training_checkpoints,
    build_runner,
    close_process_group,
    exit_rank,
    init_model_weights,
    prepare_runner_config,
)
from .measure import (
    FreshProcessDied,
    PeakMemory,
    SavedForBackward,
    ab_ratio_runs,
    alternating_samples,
    alternating_times,
    in_fresh_process,
    median_time,
    release_freed_memory_at_once,
    spread,
    step_functions,
    synchronize,
)

__all__ = [
    'prepare_runner_config', 'allow_training_checkpoints', 'build_runner', 'close_process_group',
    'exit_rank', 'init_model_weights', 'add_debug_argument', 'reports_user_errors', 'count_flops',
    'count_params',
    'FreshProcessDied', 'PeakMemory', 'SavedForBackward', 'ab_ratio_runs',
    'alternating_samples', 'alternating_times', 'in_fresh_process', 'median_time',
    'release_freed_memory_at_once', 'spread',
    'step_functions', 'synchronize'
]
