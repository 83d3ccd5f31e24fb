"""The prepared GPU check runs its whole path on the CPU in dry-run mode (tiny models, sizes)."""
import os

import pytest
from conftest import run_tool, tool_env

pytestmark = pytest.mark.integration


def test_gpu_check_dry_run(tmp_path):
    out = tmp_path / 'gpu_check.md'
    run_tool('tools/analysis_tools/gpu_check.py', '--dry-run', '--families', 'TransCNN',
             '--references', 'Swin-T', '--out', str(out))
    page = out.read_text()
    assert '# GPU check: CPU (dry run)' in page
    backbone_rows = [line for line in page.splitlines() if line.startswith('| TransCNN | 96x160')]
    assert len(backbone_rows) == 2  # fp32 and bf16
    # every row of ours carries its ratio to Swin-T's forward+backward at the same size and dtype
    ratios = [float(row.strip('| ').split('|')[-1]) for row in backbone_rows]
    assert all(ratio > 0 for ratio in ratios)
    assert sum(line.startswith(('| Swin-T | 64x64 |', '| Swin-T | 96x160 |'))
               for line in page.splitlines()) == 4
    train = [line for line in page.splitlines() if line.startswith('| TransCNN | 64x64 | 2 |')]
    assert len(train) == 1 and 'all finite' in train[0]
    assert '| retinanet | TransCNN |' in page
    assert '| mask_rcnn | TransCNN |' in page
    # what bf16 autocast keeps for backward: the memory-lean model less than the plain one
    kept = {line.split('|')[2].strip(): float(line.split('|')[3])
            for line in page.splitlines() if line.startswith('| TransCNN | ')
            and line.split('|')[2].strip() in ('plain', 'lean')}
    assert 0 < kept['lean'] < kept['plain']
    assert any(line.startswith('| Swin-T | plain |') for line in page.splitlines())


def test_gpu_check_reports_missing_mmcv_ops(tmp_path):
    """Where mmcv has no compiled ops (mmcv-lite on a bare GPU image) the detector section says
    so, and the other sections still run."""
    # a sitecustomize that makes `import mmcv.ops` fail, as it does without mmcv._ext
    (tmp_path / 'sitecustomize.py').write_text("import sys\nsys.modules['mmcv.ops'] = None\n")
    env = tool_env()
    env['PYTHONPATH'] = str(tmp_path) + os.pathsep + env['PYTHONPATH']
    out = tmp_path / 'gpu_check.md'
    run_tool('tools/analysis_tools/gpu_check.py', '--dry-run', '--families', 'NesT',
             '--references', '--sections', 'train', 'detectors', '--out', str(out), env=env)
    page = out.read_text()
    assert 'Not measured: mmcv has no compiled ops here' in page
    assert '| NesT | 64x64 | 2 |' in page
