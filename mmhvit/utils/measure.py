"""Measuring primitives: median timing, alternating A/B timing, peak memory, fresh processes.

The benchmark sections (:mod:`mmhvit.analysis.benchmark`) and the GPU check are written with
these; each is small enough to read at a glance and is tested in ``tests/test_measure.py``.
"""
import ctypes
import gc
import multiprocessing
import signal
import statistics
import time
import traceback
from typing import Callable, List, Sequence, Tuple

import torch


def synchronize(device: str) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device == 'cuda':
        torch.cuda.synchronize()


def timed(fn: Callable, device: str) -> float:
    """Seconds of one call of ``fn``, the device synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def median_time(fn: Callable, repeats: int, warmup: int, device: str = 'cpu') -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn, device) for _ in range(repeats))


def alternating_samples(fns: Sequence[Callable], repeats: int, warmup: int,
                        device: str = 'cpu') -> List[List[float]]:
    """Seconds of each of ``repeats`` calls of each function, run A, B, A, B... (round-robin) so
    that drift hits all alike, after ``warmup`` untimed calls of each."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, bucket in zip(fns, times):
            bucket.append(timed(fn, device))
    return times


def alternating_times(fns: Sequence[Callable], repeats: int, warmup: int,
                      device: str = 'cpu') -> List[float]:
    """Median seconds of each function, run A, B, A, B... so that drift hits both alike."""
    return [statistics.median(bucket)
            for bucket in alternating_samples(fns, repeats, warmup, device)]


def ab_ratio_runs(a: Callable, b: Callable, runs: int, repeats: int, warmup: int,
                  device: str = 'cpu') -> Tuple[float, float, List[float]]:
    """``runs`` runs of A/B-alternating timing: (median seconds of ``a``, of ``b``, [a / b of
    each run]); the spread of the ratios shows the noise."""
    ratios, times_a, times_b = [], [], []
    for _ in range(runs):
        time_a, time_b = alternating_times([a, b], repeats, warmup, device)
        ratios.append(time_a / time_b)
        times_a.append(time_a)
        times_b.append(time_b)
    return statistics.median(times_a), statistics.median(times_b), ratios


def spread(values: Sequence[float], digits: int = 2) -> str:
    """'min / median / max' of ``values``, ``digits`` decimals."""
    return ' / '.join(f'{v:.{digits}f}' for v in (min(values), statistics.median(values),
                                                   max(values)))


def proc_status(field: str) -> int:
    """A memory field of /proc/self/status (e.g. 'VmRSS:'), in bytes."""
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f'{field} not in /proc/self/status')


class PeakMemory:
    """Peak memory of a block above its start, in bytes (``.peak``): the CUDA allocator's peak, or
    on the CPU the process's resident-set high-water mark (Linux VmHWM).

    The CPU figure only means something in a fresh process (freed memory stays resident and is
    reused, and VmHWM never drops): measure each CPU case through :func:`in_fresh_process`.
    """

    def __init__(self, device: str = 'cpu'):
        self.device = device
        self.peak = None

    def __enter__(self):
        gc.collect()
        if self.device == 'cuda':
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = proc_status('VmRSS:')
        return self

    def __exit__(self, *exc):
        if self.device == 'cuda':
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.peak = proc_status('VmHWM:') - self.base


MALLOC_MMAP_THRESHOLD = -3  # glibc's mallopt parameter M_MMAP_THRESHOLD
MMAP_THRESHOLD_BYTES = 64 * 1024


def release_freed_memory_at_once() -> bool:
    """Make glibc's malloc map every allocation of 64 KiB or more on its own and unmap it when
    freed (a fixed ``M_MMAP_THRESHOLD``; glibc otherwise raises the threshold as blocks are freed
    and keeps freed tensors resident for reuse), so that the resident set, and
    :class:`PeakMemory`'s CPU peak, follows the memory in use. Call it first in a fresh process;
    False where the C library is not glibc (nothing changed)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    return mallopt(MALLOC_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1


class SavedForBackward:
    """Counts what autograd keeps for backward inside the ``with`` block: the bytes of the
    distinct tensor storages its saved-tensor hooks see packed (``.bytes``; views of one storage
    count once)."""

    def __init__(self):
        self.storages = {}
        self._hooks = []

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    def __enter__(self):  # may be entered again, e.g. once per forward call
        self._hooks.append(torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t))
        self._hooks[-1].__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.pop().__exit__(*exc)

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


class FreshProcessDied(RuntimeError):
    """The process of :func:`in_fresh_process` ended without a result: killed by a signal (the
    kernel's out-of-memory killer sends SIGKILL) or exited from native code."""


class ChildTraceback(Exception):
    """The traceback of an exception raised in a fresh process, as the cause of the re-raised one
    (multiprocessing's ``RemoteTraceback`` does the same for a Pool)."""

    def __str__(self):
        return f'in the fresh process:\n{self.args[0]}'


def _run_and_send(conn, threads: int, fn: Callable, args: tuple) -> None:
    torch.set_num_threads(threads)
    try:
        message = (True, fn(*args))
    except BaseException as error:  # noqa: B902  (handed to the parent, which raises it)
        message = (False, (error, traceback.format_exc()))
    try:
        conn.send(message)
    except Exception as error:  # an unpicklable result or exception: send what it said
        conn.send((False, (RuntimeError(f'{type(error).__name__}: {error}'),
                           traceback.format_exc())))
    conn.close()


def in_fresh_process(fn: Callable, *args, threads: int = 1):
    """``fn(*args)`` in a new (spawned, not forked) process with ``threads`` torch threads; returns
    its result. ``fn`` must be importable (module level) and its result picklable.

    An exception in ``fn`` is raised here (the child's traceback as its cause); a child that dies
    without a result (e.g. killed for memory) raises :class:`FreshProcessDied` instead of leaving
    the caller waiting, as a ``multiprocessing.Pool`` does when its worker is killed.
    """
    context = multiprocessing.get_context('spawn')
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_run_and_send, args=(sender, threads, fn, args))
    process.start()
    sender.close()  # the child's end: recv() then sees EOF when the child dies
    try:
        ok, payload = receiver.recv()
    except EOFError:
        process.join()
        code = process.exitcode
        how = (f'was killed by {signal.Signals(-code).name}' if code < 0 else
               f'exited with code {code}')
        hint = ' (the out-of-memory killer sends SIGKILL: see `dmesg`)' if code == -9 else ''
        raise FreshProcessDied(f'{getattr(fn, "__name__", fn)}{args!r} in a fresh process '
                               f'{how} before returning a result{hint}') from None
    finally:
        receiver.close()
    process.join()
    if ok:
        return payload
    error, child_traceback = payload
    raise error from ChildTraceback(child_traceback)


def step_functions(model: torch.nn.Module, x: torch.Tensor, autocast):
    """(forward without grad, forward + backward of the mean of every output) of ``model`` on
    ``x`` under the ``autocast`` context."""

    def forward():
        with torch.no_grad(), autocast:
            model(x)

    def forward_backward():
        with autocast:
            out = model(x)
            out = out if isinstance(out, (tuple, list)) else [out]
            loss = sum(o.float().mean() for o in out)
        loss.backward()

    return forward, forward_backward
