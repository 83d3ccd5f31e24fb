import argparse
import os.path as osp

import pytest
from conftest import run_in_process

pytestmark = pytest.mark.integration


def run_benchmark(capsys, *args):
    """tools/analysis_tools/benchmark.py in this process (a fresh interpreter would add seconds
    of imports to each test; the tool's memory probes still run in fresh processes); what it
    printed."""
    import torch
    threads = torch.get_num_threads()
    try:
        run_in_process('tools/analysis_tools/benchmark.py', *args)
    finally:
        torch.set_num_threads(threads)  # the tool fixes its own --threads
    captured = capsys.readouterr()
    return captured.out + captured.err


def markdown_tables(text):
    tables, current = [], []
    for line in text.splitlines() + ['']:
        if line.startswith('|'):
            current.append([cell.strip() for cell in line.strip('|').split('|')])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_benchmark_tool_writes_well_formed_tables(tmp_path, capsys):
    out = tmp_path / 'bench.md'
    log = run_benchmark(
        capsys, '--sections', 'params', 'speed', 'profile', 'scaling', 'quickstart', '--families',
        'TransCNN', 'HAT-Net', '--archs', 'tiny', '--sizes', '64x64', '64x96', '--batches', '1',
        '--repeats', '1', '--warmup', '0', '--ratio-runs', '1', '--quickstart-algos', 'retinanet',
        '--quickstart-backbones', 'nest-q', '--threads', '1', '--no-vit', '--out', str(out))
    assert 'params/FLOPs: TransCNN-tiny' in log  # progress output
    text = out.read_text()
    tables = markdown_tables(text)
    assert len(tables) == 7  # params, speed, profile (one a family), scaling, linearity, quickstart
    for table in tables:
        header, rule, *rows = table
        assert set(''.join(rule)) == {'-'}
        assert rows and all(len(row) == len(header) for row in rows)
    params = {row[0]: row for row in tables[0][2:]}
    assert list(params) == ['TransCNN-tiny', 'HAT-Net-tiny']
    assert abs(float(params['TransCNN-tiny'][2]) - 13.316) < 0.01  # the official TransCNN-Tiny
    # HAT-Net-Tiny: the official count less the attn.proj_norm its forward never uses; its GFLOPs
    # without the attention products are the official 2.0.
    assert abs(float(params['HAT-Net-tiny'][2]) - 12.650) < 0.01
    assert abs(float(params['HAT-Net-tiny'][4]) - 2.0) < 0.05
    for row in params.values():
        assert float(row[5]) > float(row[4]) > 0  # attention products add FLOPs

    speed = {row[0]: row for row in tables[1][2:]}
    # The restated official models and ours, on weights converted by our converter, agree.
    for label in ('TransCNN-S vs official equations (restated), 256',
                  'HAT-Net-S vs official equations (restated), 224'):
        assert float(speed[label][5]) < 1e-4
        low, median, high = (float(v) for v in speed[label][4].split(' / '))
        assert 0 < low <= median <= high

    for table in tables[2:4]:  # profile: TransCNN, HAT-Net
        profile = {row[0]: row for row in table[2:]}
        assert float(profile['**total**'][1].strip('*')) > 0
        assert 'aten::mkldnn_convolution' in profile or 'aten::convolution' in profile
    assert '### HAT-Net: ours vs official equations (restated)' in text

    del tables[3]  # the HAT-Net profile: the tables below keep their places
    assert len(tables[3]) == 2 + 4  # scaling: one row per family and size
    assert osp.getsize(tmp_path / 'bench_scaling_cpu.png') > 0
    # The sections in the page's order: scaling before quickstart.
    sections = ('## Cost against input size (CPU', '## Quickstart training speed')
    assert text.index(sections[0]) < text.index(sections[1])

    quickstart = {row[0]: row for row in tables[5][2:]}
    # the backbone asked for and the reference, ResNet-18, always measured
    assert list(quickstart) == ['retinanet_nest-q_16e_shapes', 'retinanet_r18_16e_shapes']
    assert float(quickstart['retinanet_r18_16e_shapes'][2]) == 1.0
    assert all(float(row[1]) > 0 for row in quickstart.values())


def test_quickstart_section_finds_every_config():
    """Every task x backbone of the quickstart section names one existing config, whatever its
    schedule (the Mask R-CNN configs were renamed _8e_ -> _16e_ under a hard-coded name once)."""
    from mmhvit.analysis.benchmark.quickstart_speed import (
        QUICKSTART_ALGOS,
        QUICKSTART_BACKBONES,
        quickstart_config,
    )
    for algo in QUICKSTART_ALGOS:
        for backbone in QUICKSTART_BACKBONES:
            assert osp.isfile(quickstart_config(algo, backbone))
    assert quickstart_config('mask-rcnn', 'tnt-q').endswith('mask-rcnn_tnt-q_16e_shapes.py')
    with pytest.raises(FileNotFoundError, match=r'one quickstart config retinanet_vit_\*'):
        quickstart_config('retinanet', 'vit')


@pytest.mark.parametrize('family', ['TransCNN', 'HAT-Net'])
def test_reference_pair_holds_the_same_weights(family):
    """The speed section's pair: the official model (the restatement, under the official key
    names) and ours with its weights converted by our converter give the same logits."""
    import torch

    from mmhvit.analysis.benchmark.models import FAMILIES, reference_pair
    from mmhvit.testing import hatnet_shapes, transcnn_shapes
    reference, ours, size, name = reference_pair(family)
    assert (size, name) == (FAMILIES[family]['size'], 'official equations (restated)')
    layout = {'TransCNN': transcnn_shapes, 'HAT-Net': hatnet_shapes}[family]
    arch = ours.model.backbone.arch_settings
    assert {k: tuple(v.shape) for k, v in reference.state_dict().items()} == layout(arch)
    x = torch.randn(2, 3, 64, 96, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, logits = reference(x), ours(x)
    assert logits.shape == (2, 1000) and expected.std() > 0.1  # not a degenerate pair
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-4)


def test_benchmark_plugins_section(tmp_path, capsys):
    out = tmp_path / 'plugins.md'
    run_benchmark(capsys, '--sections', 'plugins', '--plugins', 'hmhsa', '--plugin-size', '64x96',
                  '--repeats', '1', '--warmup', '0', '--threads', '1', '--out', str(out))
    text = out.read_text()
    (header, rule, *rows), = markdown_tables(text)
    # only the section asked for: no params, speed, scaling or GPU section
    assert [line for line in text.splitlines() if line.startswith('#')] == [
        '# Benchmarks', '## Attention plugins in ResNet-50 (CPU, fp32, 64x96, batch 1)']
    # the plugin asked for and the reference, the plain ResNet-50, always measured
    assert [row[0] for row in rows] == ['ResNet-50', '+ H-MHSA (mmhvit.HMHSAPlugin)']
    params = [float(row[1]) for row in rows]
    assert abs(params[0] - 23.51) < 0.01  # torchvision's ResNet-50 without its fc
    assert params[1] > params[0]  # the plugin adds parameters
    flops = [float(row[2]) for row in rows]
    assert all(f > flops[0] for f in flops[1:])
    assert all(float(row[3]) > 0 and float(row[4]) >= 0 for row in rows)


def test_every_plugin_of_the_plugins_section_adds_parameters():
    from mmhvit.analysis.benchmark.plugins import PLUGIN_NAMES, build_plugin_resnet
    from mmhvit.utils import count_params
    base = count_params(build_plugin_resnet('ResNet-50'))
    for name in PLUGIN_NAMES.values():
        assert count_params(build_plugin_resnet(name)) > base, name


@pytest.mark.slow  # about 20 s: two fresh processes building a detector
def test_benchmark_detection_section(tmp_path, capsys):
    out = tmp_path / 'detection.md'
    log = run_benchmark(capsys, '--sections', 'detection', '--det-algos', 'retinanet',
                        '--det-backbones', 'NesT-T', '--det-size', '64x96',
                        '--det-batches', '1', '--repeats', '1', '--warmup', '0', '--threads', '1',
                        '--out', str(out))
    assert 'detection: retinanet NesT-T, batch 1, peak memory' in log  # progress output
    text = out.read_text()
    assert [line for line in text.splitlines() if line.startswith('#')] == [
        '# Benchmarks', '## Detectors (CPU, fp32, 64x96)', '### RetinaNet']
    (header, rule, *rows), = markdown_tables(text)
    assert set(''.join(rule)) == {'-'} and all(len(row) == len(header) for row in rows)
    assert [(row[0], row[1]) for row in rows] == [('NesT-T', '1')]
    rows = {row[0]: dict(zip(header, row)) for row in rows}
    for row in rows.values():
        for column in ('training step (s) min / median / max', 'inference (s) min / median / max'):
            low, median, high = (float(v) for v in row[column].split(' / '))
            assert 0 < low == median == high  # one repeat
        assert float(row['peak memory training (MiB)']) > 0
        assert float(row['backbone GFLOPs']) > 0
        assert 0 < float(row['backbone params (M)']) < float(row['params (M)'])
        assert row['training time / Swin-T'] == row['target'] == '—'  # no Swin-T row to divide by
    # The summary line names ours (only NesT-T here) and says the targets went unchecked.
    assert ('- RetinaNet, batch 1: fastest training step of ours NesT-T' in text
            and 'no Swin-T row: targets not checked.' in text)


def test_benchmark_detection_profile_section(tmp_path, capsys):
    out = tmp_path / 'profile.md'
    log = run_benchmark(capsys, '--sections', 'detection-profile',
                        '--det-algos', 'retinanet', '--det-backbones', 'TNT-S', 'ResNet-50',
                        '--det-size', '64x96', '--threads', '1', '--out', str(out))
    assert 'detection profile: RetinaNet TNT-S' in log
    text = out.read_text()
    (header, rule, *rows), = markdown_tables(text)
    assert header[0] == 'backbone' and header[-2:] == ['total (s)', 'saved for backward (MiB)']
    rows = {row[0]: dict(zip(header[1:], map(float, row[1:]))) for row in rows}
    assert list(rows) == ['TNT-S', 'ResNet-50']
    for row in rows.values():
        groups = [v for k, v in row.items() if k not in ('total (s)', 'saved for backward (MiB)')]
        assert abs(sum(groups) - row['total (s)']) < 0.05 and row['total (s)'] > 0
        assert row['saved for backward (MiB)'] > 0 and row['conv'] > 0
    # The transformer's linears are matmuls; ResNet-50 runs no attention at all.
    assert rows['TNT-S']['matmul'] > 0 and rows['ResNet-50']['attention'] == 0


def test_op_groups():
    from mmhvit.analysis.benchmark.detection import op_group
    assert op_group('aten::_scaled_dot_product_flash_attention_for_cpu') == 'attention'
    assert op_group('aten::convolution_backward') == 'conv'
    assert op_group('aten::native_layer_norm_backward') == 'norm'
    assert op_group('aten::addmm') == op_group('aten::mm') == 'matmul'
    assert op_group('aten::copy_') == 'copies'
    assert op_group('aten::gelu_backward') == 'element-wise, pooling'
    assert op_group('aten::_foreach_mul_') == 'optimizer'
    assert op_group('mmcv::nms') == 'other'


def test_detection_summary_is_computed_from_the_figures():
    from mmhvit.analysis.benchmark.detection import summary_line, table_row

    def result(train, memory):
        return dict(train=[train], infer=[1.], train_peak=memory * 2**20, infer_peak=2**20,
                    backbone_params=1., params=2., gflops=3.)

    results = {'NesT-T': result(0.7, 90), 'TNT-S': result(1.1, 50), 'Swin-T': result(1., 100)}
    line = summary_line('RetinaNet', 2, results)
    assert line.startswith('- RetinaNet, batch 2: fastest training step of ours NesT-T (0.700 s), '
                           'lightest TNT-S (50 MiB)')
    # TNT-S is slower than Swin-T: not every family is within 1.0x; the best are within 0.8x.
    assert 'NesT-T 0.70x / 0.90x, TNT-S 1.10x / 0.50x' in line
    assert 'Every family ≤ 1.0x: missed; the best ≤ 0.8x: time met (0.70x), memory met (0.50x).' \
        in line
    base = results['Swin-T']
    row = table_row('NesT-T', 2, results['NesT-T'], base)
    assert row.endswith('| 0.70 | 0.90 | 1.00 | 1.00 | met |')
    assert table_row('TNT-S', 2, results['TNT-S'], base).endswith('| missed |')
    assert table_row('Swin-T', 2, base, base).endswith('| 1.00 | 1.00 | 1.00 | 1.00 | — |')


def test_detection_rows_say_where_a_peak_process_died(monkeypatch):
    from mmhvit.analysis.benchmark import detection
    from mmhvit.utils import FreshProcessDied

    def out_of_memory(fn, algo, name, batch, size, training, threads):
        if training:
            raise FreshProcessDied('peak_probe was killed by SIGKILL')
        return 5 * 2**20

    monkeypatch.setattr(detection, 'in_fresh_process', out_of_memory)
    args = argparse.Namespace(det_size='64x96', threads=1)
    peak = detection.peaks('mask-rcnn', 'TransCNN-B', 2, args)
    assert peak == dict(train_peak=None, infer_peak=5 * 2**20)

    def result(train, memory):
        return dict(train=[train], infer=[1.], train_peak=memory, infer_peak=2**20,
                    backbone_params=1., params=2., gflops=3.)

    results = {'TransCNN-B': result(0.9, None), 'NesT-T': result(0.7, 90 * 2**20),
               'Swin-T': result(1., 100 * 2**20)}
    base = results['Swin-T']
    # Its memory and memory ratio are unknown, so is its target; its time still counts.
    assert detection.table_row('TransCNN-B', 2, results['TransCNN-B'], base).endswith(
        '| 0.900 / 0.900 / 0.900 | 1.000 / 1.000 / 1.000 | died | 1 | 0.90 | — | 1.00 | 1.00 | '
        'unknown |')
    line = detection.summary_line('Mask R-CNN', 2, results)
    assert ('lightest NesT-T (90 MiB) (training peak not measured, its process died: '
            'TransCNN-B)' in line)
    assert 'TransCNN-B 0.90x / ?, NesT-T 0.70x / 0.90x' in line
    assert 'Every family ≤ 1.0x: unknown; the best ≤ 0.8x: time met (0.70x), memory missed ' \
        '(0.90x).' in line


def test_benchmark_writes_each_detector_table_as_it_completes(tmp_path, monkeypatch):
    """A run that dies in its second detector keeps the first one's table on the page."""
    from mmhvit.analysis.benchmark import detection
    monkeypatch.setattr(detection, 'peaks',
                        lambda algo, name, batch, args: dict(train_peak=1, infer_peak=1))

    def detector_lines(args, algo, height, width, peak):
        assert set(peak) == {(a, 'NesT-T', 1) for a in ('retinanet', 'mask-rcnn')}  # all first
        if algo == 'mask-rcnn':
            raise RuntimeError('the machine ran out of memory')
        return ['### RetinaNet', '', '| the RetinaNet table |', '']

    monkeypatch.setattr(detection, 'detector_lines', detector_lines)
    out = tmp_path / 'page.md'
    with pytest.raises(RuntimeError, match='ran out of memory'):
        run_in_process('tools/analysis_tools/benchmark.py', '--sections', 'detection',
                       '--det-algos', 'retinanet', 'mask-rcnn', '--det-backbones', 'NesT-T',
                       '--det-batches', '1', '--out', str(out))
    headings = [line for line in out.read_text().splitlines() if line.startswith(('#', '|'))]
    assert headings == ['# Benchmarks', '## Detectors (CPU, fp32, 800x1344)', '### RetinaNet',
                        '| the RetinaNet table |']


@pytest.mark.parametrize('option, refused', [
    (['--det-backbones', 'NesT-T', 'Swin-S'], "argument --det-backbones: invalid choice: 'Swin-S'"),
    (['--det-size', '800x'], "--det-size takes HxW with H, W >= 32, got '800x'"),
])
def test_benchmark_detection_refuses_bad_options(option, refused, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_in_process('tools/analysis_tools/benchmark.py', '--sections', 'detection', *option)
    errors = [line for line in capsys.readouterr().err.splitlines() if 'error' in line]
    assert exit_info.value.code == 2 and len(errors) == 1 and refused in errors[0]


def test_benchmark_memory_section(tmp_path, capsys):
    """Each variant of ours measured; the lean backward keeps less than the plain one, and
    checkpointing less again."""
    out = tmp_path / 'memory.md'
    log = run_benchmark(capsys, '--sections', 'memory', '--det-algos', 'retinanet',
                        '--det-backbones', 'HAT-Net-S', '--det-size', '128x160', '--det-batches',
                        '1', '--repeats', '1', '--warmup', '0', '--threads', '1', '--out',
                        str(out))
    assert 'memory: retinanet HAT-Net-S lean + with_cp, batch 1 (fresh process)' in log
    header, _, *rows = markdown_tables(out.read_text())[0]
    assert header[:3] == ['backbone', 'variant', 'saved for backward (MiB)']
    saved = {row[1]: float(row[2]) for row in rows}
    # HAT-Net: no long attention
    assert list(saved) == ['plain', 'with_cp alone', 'lean', 'lean + with_cp']
    assert saved['lean + with_cp'] < saved['lean'] < saved['plain']
    assert saved['lean + with_cp'] <= saved['with_cp alone'] < saved['plain']
    timed = {row[1]: row[6] for row in rows}
    assert timed['lean + with_cp'] == '—' and timed['plain'].count('/') == 2
    # the timed rows' backbone GFLOPs (the same products lean or not)
    assert header[9] == 'backbone GFLOPs'
    gflops = {row[1]: row[9] for row in rows}
    assert float(gflops['plain']) == float(gflops['lean']) > 0 and gflops['with_cp alone'] == '—'


def test_memory_rows_keep_the_long_attention_only_where_a_config_recomputes_it():
    from mmhvit.analysis.benchmark.memory import variants
    names = {name: [v[0] for v in variants('retinanet', name)]
             for name in ('PyramidTNT-S', 'NesT-T', 'Swin-T')}
    assert names['PyramidTNT-S'] == ['plain', 'with_cp alone', 'lean, long attention kept',
                                     'lean', 'lean + with_cp']
    assert names['NesT-T'] == ['plain', 'with_cp alone', 'lean', 'lean + with_cp']
    assert names['Swin-T'] == ['plain', 'with_cp']
    # --memory-rows targets: the rows the targets read
    assert [v[0] for v in variants('retinanet', 'PyramidTNT-S', 'targets')] == [
        'plain', 'lean', 'lean + with_cp']
    assert [v[0] for v in variants('retinanet', 'Swin-T', 'targets')] == ['plain']


def test_memory_time_targets_are_checked_per_backbone_gflop():
    """Step per backbone GFLOP against Swin-T's for every family; NesT-T's step against
    Swin-T's."""
    from mmhvit.analysis.benchmark.memory import time_target_lines
    base = dict(train=[10., 10., 12.], gflops=100.)  # 0.1 s per GFLOP
    rows = {('NesT-T', 'lean'): dict(train=[12., 12., 13.], gflops=150.),   # 0.08
            ('PyramidTNT-S', 'lean'): dict(train=[13., 13., 13.], gflops=110.)}  # 0.118
    lines = time_target_lines(rows, base, ['NesT-T', 'PyramidTNT-S'])
    assert lines == ['- lean step per backbone GFLOP <= 1.0x Swin-T: missed: PyramidTNT-S 1.18x',
                     '- NesT-T lean step <= 1.0x Swin-T: missed (1.20x)']
    rows['PyramidTNT-S', 'lean']['train'] = [10.] * 3
    assert time_target_lines(rows, base, ['PyramidTNT-S'])[0].endswith('met by every family')
