import os.path as osp

from conftest import run_tool


def markdown_tables(text):
    tables, current = [], []
    for line in text.splitlines() + ['']:
        if line.startswith('|'):
            current.append([cell.strip() for cell in line.strip('|').split('|')])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_benchmark_tool_writes_well_formed_tables(tmp_path):
    out = tmp_path / 'bench.md'
    log = run_tool('tools/analysis_tools/benchmark.py', '--sections', 'params', 'speed', 'scaling',
                   'gpu', '--families', 'TransCNN', '--archs', 'tiny', '--sizes', '64x64', '64x96',
                   '--batches', '1', '--repeats', '1', '--warmup', '0', '--threads', '1',
                   '--no-vit', '--out', str(out))
    assert 'params/FLOPs: TransCNN-tiny' in log  # progress output
    text = out.read_text()
    tables = markdown_tables(text)
    assert len(tables) == 4  # params, speed, scaling, linearity
    for table in tables:
        header, rule, *rows = table
        assert set(''.join(rule)) == {'-'}
        assert rows and all(len(row) == len(header) for row in rows)
    params_row = tables[0][2]
    assert params_row[0] == 'TransCNN-tiny'
    assert abs(float(params_row[2]) - 13.316) < 0.01  # the official TransCNN-Tiny count
    assert float(params_row[5]) > float(params_row[4]) > 0  # attention products add FLOPs
    assert len(tables[2]) == 2 + 2  # one row per size
    assert osp.getsize(tmp_path / 'bench_scaling_cpu.png') > 0
    assert 'Not measured' in text or 'GPU:' in text


def test_benchmark_plugins_section(tmp_path):
    out = tmp_path / 'plugins.md'
    run_tool('tools/analysis_tools/benchmark.py', '--sections', 'plugins', '--plugin-size',
             '64x96', '--repeats', '1', '--warmup', '0', '--threads', '1', '--out', str(out))
    (header, rule, *rows), = markdown_tables(out.read_text())
    assert [row[0] for row in rows] == ['ResNet-50', '+ H-MHSA (mmhvit.HMHSAPlugin)',
                                        '+ GeneralizedAttention (mmcv)', '+ NonLocal2d (mmcv)']
    params = [float(row[1]) for row in rows]
    assert abs(params[0] - 23.51) < 0.01  # torchvision's ResNet-50 without its fc
    assert all(p > params[0] for p in params[1:])  # every plugin adds parameters
    flops = [float(row[2]) for row in rows]
    assert all(f > flops[0] for f in flops[1:])
    assert all(float(row[3]) > 0 and float(row[4]) >= 0 for row in rows)
