"""tools/misc/build_progress.py, the mmcv build's progress lines of tools/setup_env.sh, on a fake
source tree laid out as setuptools and torch's BuildExtension lay out mmcv's."""
import subprocess
import sys
import time

import pytest
from conftest import REPO

pytestmark = pytest.mark.integration

TOOL = 'tools/misc/build_progress.py'


def build_progress(*args, **kwargs):
    return subprocess.run([sys.executable, TOOL, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, **kwargs)


def fake_build(tmp_path, sources, compiled, ninja=True):
    """An unpacked source tree during ``pip wheel``: build.ninja naming ``sources`` (C++ and CUDA,
    one path with a space, as ninja escapes it), ``compiled`` of them already objects."""
    src = tmp_path / 'mmcv-2.1.0'
    temp = src / 'build' / 'temp.linux-x86_64-cpython-311'
    (temp / 'mmcv' / 'ops' / 'csrc' / 'pytorch' / 'cpu').mkdir(parents=True)
    (src / 'build' / 'lib.linux-x86_64-cpython-311').mkdir()  # holds no objects
    lines = ['ninja_required_version = 1.3', 'cxx = c++', '',
             'rule compile', '  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out', '']
    for index, source in enumerate(sources):
        rule = 'cuda_compile' if source.endswith('.cu') else 'compile'
        obj = temp / source.replace('.cpp', '.o').replace('.cu', '.o')
        lines.append(f'build {str(obj).replace(" ", "$ ")}: {rule} {src / source}')
        if index < compiled:
            obj.parent.mkdir(parents=True, exist_ok=True)
            obj.write_bytes(b'\x7fELF')
    if ninja:
        (temp / 'build.ninja').write_text('\n'.join(lines) + '\n')
    return src


SOURCES = ['mmcv/ops/csrc/pytorch/nms.cpp', 'mmcv/ops/csrc/pytorch/roi align.cpp',
           'mmcv/ops/csrc/pytorch/cpu/nms_cpu.cpp', 'mmcv/ops/csrc/pytorch/cuda/nms_cuda.cu']


def test_counts_compiled_objects_out_of_those_build_ninja_names(tmp_path):
    sys.path.insert(0, f'{REPO}/tools/misc')
    try:
        from build_progress import compile_progress, progress_line
    finally:
        sys.path.pop(0)
    assert compile_progress(str(fake_build(tmp_path / 'a', SOURCES, 3))) == (3, 4)
    assert compile_progress(str(fake_build(tmp_path / 'b', SOURCES, 0))) == (0, 4)
    # before BuildExtension has written build.ninja (or a build without ninja): no total
    assert compile_progress(str(fake_build(tmp_path / 'c', SOURCES, 0, ninja=False))) == (0, None)
    assert compile_progress(str(fake_build(tmp_path / 'd', SOURCES, 2, ninja=False))) == (2, None)
    assert progress_line(3, 77, 330.9, 'mmcv build') == 'mmcv build: 3/77 ops compiled, 5 min 30 s'
    assert progress_line(0, None, 12, 'mmcv build') == 'mmcv build: preparing the build, 0 min 12 s'
    assert progress_line(2, None, 61, 'x') == 'x: 2 ops compiled, 1 min 1 s'


def test_prints_one_line_or_one_per_interval_while_the_build_runs(tmp_path):
    src = fake_build(tmp_path, SOURCES, 1)
    once = build_progress(str(src), '--label', 'mmcv build', '--prefix', '[setup_env]   ')
    assert once.returncode == 0, once.stderr
    assert once.stdout == '[setup_env]   mmcv build: 1/4 ops compiled, 0 min 0 s\n'

    build = subprocess.Popen(['sleep', '2.5'])  # ended, it stays a zombie until waited for
    start = time.monotonic()
    watched = build_progress(str(src), '--every', '1', '--while-pid', str(build.pid))
    build.wait()
    lines = watched.stdout.splitlines()
    assert watched.returncode == 0, watched.stderr
    assert 2 <= len(lines) <= 3 and all(line.startswith('build: 1/4 ops compiled, 0 min ')
                                        for line in lines), lines
    assert time.monotonic() - start < 10  # it ended by itself once the build had ended


def test_bad_arguments_get_one_clear_error(tmp_path):
    missing = build_progress(str(tmp_path / 'no_such_tree'))
    assert missing.returncode == 1
    assert missing.stderr == f'error: no source folder {tmp_path / "no_such_tree"}\n'
    alone = build_progress(str(tmp_path), '--every', '30')
    assert alone.returncode == 2 and '--every and --while-pid go together' in alone.stderr
