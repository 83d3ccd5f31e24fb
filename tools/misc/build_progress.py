"""How far the compiled-ops build of a Python package (mmcv's, under ``pip wheel``) has got: the
object files compiled so far out of those the build compiles, and the time since it started.

    python tools/misc/build_progress.py SOURCE_DIR [--every SECONDS --while-pid PID] [--label TEXT]

Once, or with ``--every``, one line per interval for as long as process PID lives (then it ends by
itself): tools/setup_env.sh runs it beside the mmcv build, whose own output goes to its log.

setuptools builds an extension in ``build/temp.<platform>-<python>/`` inside the unpacked source
tree. torch's ``BuildExtension`` first writes a ``build.ninja`` there that names every object file
to compile (one ``build X.o: compile X.cpp`` line per C++ source, ``cuda_compile`` per CUDA one),
then ninja compiles them into that folder; the objects are linked only once all are there.
"""
import argparse
import glob
import os
import os.path as osp
import re
import sys
import time
from typing import Optional, Tuple

# An object that build.ninja compiles: compile (C++), cuda_compile, ... (paths may hold '$ ').
COMPILE_TARGET = re.compile(r'^build (.+?\.o): \w*compile ', re.MULTILINE)


def build_dirs(source_dir: str) -> list:
    """setuptools' temporary build folders of the source tree (``build/temp*``)."""
    return sorted(d for d in glob.glob(osp.join(source_dir, 'build', 'temp*')) if osp.isdir(d))


def compile_progress(source_dir: str) -> Tuple[int, Optional[int]]:
    """``(object files compiled, object files the build compiles)`` of the source tree.

    The second is None until the build has written its ``build.ninja`` (and stays None for a
    build without ninja, which compiles one source after the other).
    """
    if not osp.isdir(source_dir):
        raise FileNotFoundError(f'no source folder {source_dir}')
    compiled, total = 0, None
    for folder in build_dirs(source_dir):
        compiled += len(glob.glob(osp.join(folder, '**', '*.o'), recursive=True))
        ninja_file = osp.join(folder, 'build.ninja')
        if osp.isfile(ninja_file):
            with open(ninja_file) as f:
                total = (total or 0) + len(COMPILE_TARGET.findall(f.read()))
    return compiled, total


def progress_line(compiled: int, total: Optional[int], elapsed: float, label: str) -> str:
    """``'12/77 ops compiled, 5 min 30 s'``; before the compiler starts, what it waits for."""
    minutes, seconds = divmod(int(elapsed), 60)
    clock = f'{minutes} min {seconds} s'
    if total is None and compiled == 0:
        return f'{label}: preparing the build, {clock}'
    done = f'{compiled}/{total}' if total is not None else f'{compiled}'
    return f'{label}: {done} ops compiled, {clock}'


def is_running(pid: int) -> bool:
    """Whether process ``pid`` still runs (an ended one that its parent has not yet waited for,
    a zombie, does not)."""
    if osp.isdir('/proc/self'):  # Linux: the process's state letter, after its name in ( )
        try:
            with open(f'/proc/{pid}/stat') as f:
                return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('source_dir', help='the unpacked source tree that pip builds')
    parser.add_argument('--every', type=float, help='a line every SECONDS (with --while-pid)')
    parser.add_argument('--while-pid', type=int, help='stop once this process has ended')
    parser.add_argument('--label', default='build', help='what the line starts with')
    parser.add_argument('--prefix', default='', help='printed before each line')
    args = parser.parse_args(argv)
    if (args.every is None) != (args.while_pid is None):
        parser.error('--every and --while-pid go together')
    if args.every is not None and args.every <= 0:
        parser.error(f'--every must be positive, got {args.every}')
    start = time.monotonic()

    def report() -> None:
        compiled, total = compile_progress(args.source_dir)
        line = progress_line(compiled, total, time.monotonic() - start, args.label)
        print(args.prefix + line, flush=True)

    try:
        if args.every is None:
            report()
            return 0
        while True:
            time.sleep(args.every)
            if not is_running(args.while_pid):
                return 0
            report()
    except FileNotFoundError as error:
        print(f'error: {error}', file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
