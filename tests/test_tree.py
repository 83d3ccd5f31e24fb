"""The repository stays code, docs and the figures the docs show (check_large_files.py)."""
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.integration


def check(*args):
    return subprocess.run([sys.executable, 'tools/misc/check_large_files.py', *args], cwd=REPO,
                          capture_output=True, text=True)


def test_a_file_over_the_limit_fails_with_its_name(tmp_path):
    dump = tmp_path / 'onnxruntime_profile__x.json'
    dump.write_bytes(b'0' * 600 * 1024)
    small = tmp_path / 'small.py'
    small.write_text('x = 1\n')
    proc = check(str(dump), str(small))
    assert proc.returncode == 1
    assert 'onnxruntime_profile__x.json is 600 KB, over the 500 KB limit' in proc.stderr
    assert 'small.py' not in proc.stderr
    assert check(str(small)).returncode == 0
    assert check('--max-kb', '700', str(dump)).returncode == 0


def test_the_tracked_tree_is_within_the_limit():
    proc = check()
    assert proc.returncode == 0, proc.stderr


def test_every_python_tool_answers_help():
    """Each script under tools/ imports and parses ``--help`` (an import that names a moved or
    renamed function fails here, not on a user's machine). One process: imports are shared."""
    script = (
        'import glob, runpy, sys\n'
        'failed = []\n'
        'for path in sorted(glob.glob("tools/**/*.py", recursive=True)):\n'
        '    sys.argv = [path, "--help"]\n'
        '    try:\n'
        '        runpy.run_path(path, run_name="__main__")\n'
        '        failed.append(f"{path}: no --help")\n'
        '    except SystemExit as exit:\n'
        '        if exit.code not in (0, None):\n'
        '            failed.append(f"{path}: exit {exit.code}")\n'
        '    except Exception as error:\n'
        '        failed.append(f"{path}: {error!r}")\n'
        'print("".join(f"FAILED {line}\\n" for line in failed))\n')
    result = subprocess.run([sys.executable, '-c', script], cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    failures = [line for line in result.stdout.splitlines() if line.startswith('FAILED ')]
    assert failures == []
    assert result.stdout.count('usage:') >= 10  # the scripts did print their help
