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
