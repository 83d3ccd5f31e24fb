"""Fail when a tracked (or staged) file is larger than the limit: the tree holds code, docs and
the figures the docs show, never profiler dumps, exported models or checkpoints.

    python tools/misc/check_large_files.py [--max-kb 500] [FILE ...]

Without FILEs it checks every file git tracks (the lint step of tools/run_tests.sh); pre-commit
passes the staged files.
"""
import argparse
import os
import subprocess
import sys


def tracked_files(root: str):
    try:
        out = subprocess.run(['git', 'ls-files', '-z'], cwd=root, check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [name for name in out.decode().split('\0') if name]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('files', nargs='*')
    parser.add_argument('--max-kb', type=int, default=500)
    args = parser.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = args.files or tracked_files(root)
    if files is None:
        print('check_large_files: not a git checkout, nothing checked')
        return 0
    too_large = []
    for name in files:
        path = name if os.path.isabs(name) else os.path.join(root, name)
        if os.path.isfile(path) and os.path.getsize(path) > args.max_kb * 1024:
            too_large.append((name, os.path.getsize(path)))
    for name, size in too_large:
        print(f'error: {name} is {size / 1024:.0f} KB, over the {args.max_kb} KB limit for '
              'tracked files (profiles, exported models and checkpoints stay out of git)',
              file=sys.stderr)
    return 1 if too_large else 0


if __name__ == '__main__':
    sys.exit(main())
