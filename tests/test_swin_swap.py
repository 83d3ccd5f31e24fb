"""Swin's packaged models with our backbones (mmhvit/analysis/swin_swap*.py,
tools/analysis_tools/swin_swap.py, docs/swin_swap.md): the configs are found and grouped, and the
suite's rotation runs every group with one family, families in turn, until each family has met
every kind of neck and head; the tool runs the whole cross product.

The rotation's runs lower V3Det's class count, the DETRs' queries and the RoI / proposal counts
(``SUITE_CAPS``: CPU time only, the structure is the config's); the tool runs them as shipped.
"""
import pytest
from conftest import run_in_process
from mmengine.config import Config

from mmhvit.analysis.swin_swap import (
    NO_NECK,
    configs_root,
    discover,
    group_models,
    kinds,
    rotation,
    structure,
    swin_widths,
)
from mmhvit.analysis.swin_swap_run import (
    SUITE_CAPS,
    one_line,
    run_swap,
    swap_backbone,
)
from mmhvit.testing import FAMILIES, build_tiny

pytestmark = pytest.mark.integration

MASK_RCNN = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
UPERNET = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
CLASSIFIER = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'


@pytest.fixture(scope='module')
def swin():
    found, skipped = discover()
    return found, skipped, group_models(found)


def group_of(groups, config):
    return next(g for g in groups if config in [m.name for m in g.models])


def test_every_packaged_swin_model_is_found_and_grouped(swin):
    found, skipped, groups = swin
    names = [m.name for m in found]
    assert len(names) == len(set(names))
    # every config in exactly one group, every group one structure
    assert sorted(m.name for g in groups for m in g.models) == sorted(names)
    assert len({g.name for g in groups}) == len({g.structure for g in groups}) == len(groups)
    for group in groups:
        assert {structure(m.package, m.model, m.optim_constructor) for m in group.models} == \
            {group.structure}
        widths = [sum(swin_widths(m.package, m.model.backbone)) for m in group.models]
        assert widths[0] == min(widths)  # the representative has the smallest Swin
    assert {m.package for m in found} == {'mmdet', 'mmseg', 'mmpretrain'}
    assert all(m.model.backbone.type.split('.')[-1] in ('SwinTransformer', 'SwinTransformerV2')
               for m in found)
    mask_rcnn = group_of(groups, MASK_RCNN)
    assert mask_rcnn.name == 'mmdet.MaskRCNN' and mask_rcnn.neck_kinds == ('FPN', )
    assert 'mmdet::swin/mask-rcnn_swin-s-p4-w7_fpn_amp-ms-crop-3x_coco.py' in \
        [m.name for m in mask_rcnn.models]
    upernet = group_of(groups, UPERNET)
    assert upernet.name == 'mmseg.UPerHead' and upernet.neck_kinds == (NO_NECK, )
    assert upernet.representative.name == UPERNET  # Swin-T, the smallest
    assert group_of(groups, CLASSIFIER).head_kinds == ('classifier', )
    # the Swin configs of another structure are not in these groups: LEVIR-CD's 6 channels,
    # RTMDet-P6's fifth level
    assert group_of(groups, 'mmseg::swin/swin-tiny-patch4-window7_upernet_1xb8-20k_levir-256x256.py'
                    ).name == 'mmseg.UPerHead.6ch'
    p6 = group_of(groups, 'mmdet::rtmdet/rtmdet_l_swin_b_p6_4xb16-100e_coco.py')
    assert 'stride 64' in p6.missing()
    assert [g.name for g in groups if g.missing()] == [p6.name]


def test_left_out_configs_say_why(swin):
    found, skipped, _ = swin
    assert skipped['mmdet::glip/glip_atss_swin-t_a_fpn_dyhead_pretrain_obj365.py'].startswith(
        'needs a language model')
    assert skipped['mmdet::grounding_dino/grounding_dino_swin-t_finetune_16xb2_1x_coco.py'
                   ].startswith('needs a language model')
    assert 'video' in skipped[
        'mmdet::mask2former_vis/mask2former_swin-l-p4-w12-384-in21k_8xb2-8e_youtubevis2021.py']
    assert 'no head' in skipped['mmpretrain::glip/glip-t_headless.py']
    assert 'SimMIMSwinTransformer' in skipped[
        'mmpretrain::simmim/simmim_swin-base-w6_8xb256-amp-coslr-100e_in1k-192px.py']
    assert not {m.name for m in found} & set(skipped)
    # the language models are left out from their configs' text: resolved, they have one
    for name in ('mmdet::glip/glip_atss_swin-t_a_fpn_dyhead_pretrain_obj365.py',
                 'mmdet::mm_grounding_dino/grounding_dino_swin-t_pretrain_obj365.py'):
        package, path = name.split('::')
        model = Config.fromfile(f'{configs_root(package)}/{path}').model
        assert 'language_model' in model and model.backbone.type == 'SwinTransformer'


def test_swap_sets_the_widths_a_user_sets(swin):
    _, _, groups = swin
    upernet = group_of(groups, UPERNET).representative
    cfg = Config.fromfile(upernet.file)
    changes = swap_backbone(cfg, 'mmseg', 'NesT')
    ours = list(build_tiny('NesT').out_channels)
    assert changes == {'model.decode_head.in_channels': ours,
                       'model.auxiliary_head.in_channels': ours[2]}
    assert cfg.model.decode_head.in_channels == ours
    backbone = cfg.model.backbone
    assert backbone.type == 'mmhvit.NesT' and backbone.out_indices == (0, 1, 2, 3)
    assert 'window_size' not in backbone and 'init_cfg' not in backbone  # Swin's keys are gone
    assert cfg.custom_imports == dict(imports=['mmhvit'], allow_failed_imports=False)


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_no_fifth_level_is_one_line(family):
    with pytest.raises(ValueError, match='there is no stride-64 output') as error:
        build_tiny(family, out_indices=(1, 2, 3, 4))
    assert '\n' not in str(error.value)


def test_the_rotation_covers_every_kind_with_every_family(swin):
    _, _, groups = swin
    runs = rotation(groups, list(FAMILIES))
    assert {g.name for g, _ in runs} == {g.name for g in groups}
    assert len(set((g.name, f) for g, f in runs)) == len(runs)
    for kind, members in kinds(groups).items():
        met = {f for g, f in runs if g in members}
        assert met == set(FAMILIES), (kind, sorted(met))
    assert 'neck: ChannelMapper' in kinds(groups) and 'head: DETR' in kinds(groups)
    assert len(runs) < len(groups) * len(FAMILIES)
    again = rotation(group_models(discover()[0]), list(FAMILIES))
    assert [(g.name, f) for g, f in again] == [(g.name, f) for g, f in runs]


@pytest.mark.parametrize('family', list(FAMILIES))
def test_rotation_runs(swin, family):
    """This family's share of the rotation: each model builds, trains a step (finite loss,
    finite gradients down to the stem) and predicts; a model that needs a fifth level fails with
    our one line; a packaged config that fails whatever the backbone fails with its own error."""
    _, _, groups = swin
    failures = []
    for group, _ in [run for run in rotation(groups, list(FAMILIES)) if run[1] == family]:
        try:
            result = run_swap(group.representative, family, caps=SUITE_CAPS)
        except Exception as error:  # checked below: only the two explained failures pass
            line = one_line(error, None)
            fault = group.fault()
            expected = group.missing() and 'there is no stride-64 output' in line or \
                fault and 'unexpected keyword argument' in line and line.split("'")[1] in fault
            if not expected:
                failures.append(f'{group.name}: {line}')
            continue
        assert result['predictions'] and result['changes'], (group.name, result)
    assert not failures, failures


def test_config_fault_is_the_packaged_config_s(swin):
    _, _, groups = swin
    fcos = group_of(groups, 'mmdet::v3det/fcos_swinb_fpn_8x4_sample1e-3_mstrain_v3det_2x.py')
    assert fcos.fault().startswith('FPN does not take force_grad_on_level')
    with pytest.raises(TypeError, match="unexpected keyword argument 'force_grad_on_level'"):
        run_swap(fcos.representative, 'TNT', caps=SUITE_CAPS)
    assert [g.name for g in groups if g.fault()] == [fcos.name]


def test_tool_writes_the_table_into_the_page(swin, tmp_path, capsys):
    page = tmp_path / 'page.md'
    page.write_text('# Title\n\nProse.\n\n<!-- swin_swap.py table: begin -->\nold\n'
                    '<!-- swin_swap.py table: end -->\n\nMore prose.\n')
    run_in_process('tools/analysis_tools/swin_swap.py', '--groups', 'mmpretrain.ImageClassifier',
                   'mmdet.RTMDet.L1-4', '--families', 'TNT', 'HATNet', '--out', str(page))
    text = page.read_text()
    assert text.startswith('# Title\n\nProse.\n') and text.endswith('\n\nMore prose.\n')
    assert '\nold\n' not in text
    rows = {}
    for line in text.splitlines():  # the matrix's rows (the first table)
        if line.startswith('| mm'):
            rows.setdefault(line.split(' | ')[0], line)
    classifier = rows['| mmpretrain.ImageClassifier']
    assert classifier.endswith('| ok | ok |') and CLASSIFIER.split('::')[1] in text
    assert rows['| mmdet.RTMDet.L1-4'].count('there is no stride-64 output') == 2
    assert 'glip-t_headless.py`: no head' in text
    assert '| ok | ok |' in capsys.readouterr().out  # printed too


def test_tool_rejects_an_unknown_group(swin, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_in_process('tools/analysis_tools/swin_swap.py', '--groups', 'mmdet.Nothing')
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown group(s) ['mmdet.Nothing']; the groups: [")
    assert '\n' not in err
