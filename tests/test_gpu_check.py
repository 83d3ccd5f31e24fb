"""The prepared GPU check runs its whole path on the CPU in dry-run mode (tiny models, sizes)."""
import pytest
from conftest import run_tool

pytestmark = pytest.mark.integration


def test_gpu_check_dry_run(tmp_path):
    out = tmp_path / 'gpu_check.md'
    run_tool('tools/analysis_tools/gpu_check.py', '--dry-run', '--families', 'TransCNN',
             '--out', str(out))
    page = out.read_text()
    assert '# GPU check: CPU (dry run)' in page
    backbone_rows = [line for line in page.splitlines() if line.startswith('| TransCNN |')]
    assert len(backbone_rows) >= 4  # 2 sizes x fp32/bf16 (+ the steps row)
    assert '| retinanet | TransCNN |' in page
    assert '| mask_rcnn | TransCNN |' in page
    assert '| TransCNN | 2 |' in page and 'all finite' in page
