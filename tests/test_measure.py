"""The measuring primitives (mmhvit.utils.measure) on cases whose answer is known."""
import os
import signal
import time

import pytest
import torch

from mmhvit.utils import (
    FreshProcessDied,
    PeakMemory,
    ab_ratio_runs,
    alternating_samples,
    alternating_times,
    in_fresh_process,
    median_time,
    release_freed_memory_at_once,
    spread,
    step_functions,
)

pytestmark = pytest.mark.unit


def sleeper(seconds):
    return lambda: time.sleep(seconds)


def allocate_and_touch(mib):
    """Peak resident memory (bytes) of allocating and writing ``mib`` MiB, in this process."""
    with PeakMemory('cpu') as mem:
        block = torch.ones(mib * 2**20 // 4)
        del block
    return mem.peak


def test_median_time_runs_warmup_untimed_and_takes_the_median():
    calls = []
    durations = iter([0.05, 0.0, 0.0, 0.02, 0.0])  # warm-up 0.05 untimed; medians of the rest

    def fn():
        calls.append(1)
        time.sleep(next(durations))

    seconds = median_time(fn, repeats=4, warmup=1)
    assert len(calls) == 5
    assert seconds < 0.02  # the median of (0, 0, 0.02, 0), not the slow warm-up call


def test_alternating_times_interleaves_and_orders_by_function():
    order = []
    fast = lambda: order.append('a')  # noqa: E731
    slow = lambda: (order.append('b'), time.sleep(0.01))  # noqa: E731
    t_fast, t_slow = alternating_times([fast, slow], repeats=3, warmup=1)
    assert order == ['a', 'b'] + ['a', 'b'] * 3  # warm-ups, then A, B, A, B...
    assert t_slow >= 0.01 > t_fast


def test_alternating_samples_keeps_every_repeat_round_robin():
    order = []
    fns = [lambda name=name: order.append(name) for name in 'abc']
    samples = alternating_samples(fns, repeats=2, warmup=1)
    assert order == ['a', 'b', 'c'] + ['a', 'b', 'c'] * 2  # warm-ups, then round-robin
    assert [len(bucket) for bucket in samples] == [2, 2, 2]
    assert all(t >= 0 for bucket in samples for t in bucket)


def test_ab_ratio_runs_reports_one_ratio_per_run():
    t_a, t_b, ratios = ab_ratio_runs(sleeper(0.004), sleeper(0.002), runs=3, repeats=2, warmup=0)
    assert len(ratios) == 3 and t_a > t_b
    assert all(r > 1 for r in ratios)
    low, median, high = (float(v) for v in spread(ratios).split(' / '))
    assert low <= median <= high


def test_spread():
    assert spread([3.0, 1.0, 2.0]) == '1.00 / 2.00 / 3.00'
    assert spread([0.5, 0.25], digits=3) == '0.250 / 0.375 / 0.500'


def test_peak_memory_cpu_sees_an_allocation_in_a_fresh_process():
    peak = in_fresh_process(allocate_and_touch, 64, threads=1)
    assert 60 * 2**20 < peak < 200 * 2**20


def test_in_fresh_process_propagates_errors():
    with pytest.raises(ValueError) as error:
        in_fresh_process(int, 'not a number')
    assert 'in the fresh process' in str(error.value.__cause__)  # the child's traceback


def kill_myself():
    os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does


def test_in_fresh_process_raises_when_the_child_dies_instead_of_waiting():
    with pytest.raises(FreshProcessDied, match=r'killed by SIGKILL .*out-of-memory killer'):
        in_fresh_process(kill_myself)
    with pytest.raises(FreshProcessDied, match='exited with code 3 before returning'):
        in_fresh_process(os._exit, 3)
    assert in_fresh_process(int, '7') == 7  # and the next call works


def test_step_functions_forward_has_no_grad_and_backward_fills_grads():
    model = torch.nn.Linear(4, 2)
    forward, forward_backward = step_functions(model, torch.randn(3, 4),
                                               torch.autocast('cpu', enabled=False))
    forward()
    assert model.weight.grad is None
    forward_backward()
    assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0


def test_release_freed_memory_at_once_returns_freed_tensors_to_the_system():
    """A freed 16 MiB tensor leaves the resident set with the fixed mmap threshold; by glibc's
    default (the threshold raised by the first free) it stays resident for reuse."""
    fixed = in_fresh_process(resident_drop_after_free, True)
    if fixed is None:
        pytest.skip('not glibc: no mallopt')
    assert fixed > 12 * 2**20
    assert in_fresh_process(resident_drop_after_free, False) < 4 * 2**20


def resident_drop_after_free(fix_threshold: bool):
    """Bytes the resident set drops by when a 16 MiB tensor is freed (None: not glibc)."""
    from mmhvit.utils.measure import proc_status
    if fix_threshold and not release_freed_memory_at_once():
        return None
    block = torch.ones(4 * 2**20)  # 16 MiB: mapped on its own, then (default) the threshold rises
    del block
    block = torch.ones(4 * 2**20)
    before = proc_status('VmRSS:')
    del block
    return before - proc_status('VmRSS:')
