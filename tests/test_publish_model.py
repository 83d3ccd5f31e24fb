import collections
import hashlib
import os.path as osp
import shutil

import pytest
import torch
import yaml
from conftest import REPO, run_tool

from mmhvit.testing import assert_close, deit_checkpoint, random_state_dict, shifted, tiny_arch
from mmhvit.testing import transcnn_forward as reference_forward
from mmhvit.testing import transcnn_shapes as official_shapes

pytestmark = pytest.mark.integration

TINY = tiny_arch('TransCNN')


def test_publish_keeps_weights_and_plain_meta(tmp_path):
    from mmengine.logging import HistoryBuffer as NotPlain  # what training checkpoints pickle
    state_dict = collections.OrderedDict(w=torch.randn(3, 2), b=torch.zeros(3))
    checkpoint = dict(
        state_dict=state_dict, optimizer=dict(state={}, param_groups=[]),
        message_hub=NotPlain(),
        meta=dict(epoch=3, dataset_meta=dict(classes=('a', 'b')), hook=NotPlain()))
    src = tmp_path / 'epoch_3.pth'
    torch.save(checkpoint, src)
    with pytest.raises(Exception):
        torch.load(src, weights_only=True)

    printed = run_tool('tools/model_converters/publish_model.py', str(src),
                       str(tmp_path / 'model.pth')).strip().splitlines()[-1]
    assert printed.startswith(str(tmp_path / 'model-')) and printed.endswith('.pth')
    with open(printed, 'rb') as f:
        assert hashlib.sha256(f.read()).hexdigest()[:8] == printed[-12:-4]
    published = torch.load(printed, weights_only=True)
    assert set(published) == {'state_dict', 'meta'}
    assert published['meta'] == dict(epoch=3, dataset_meta=dict(classes=('a', 'b')))
    for key, value in state_dict.items():
        assert torch.equal(published['state_dict'][key], value)


def test_official_file_converted_published_and_loaded_by_url(release_server, tmp_path):
    """Official DeiT-shape file -> converter (by URL) -> publish (hash name, metafile entry) ->
    served by URL -> ``init_cfg`` Pretrained: the official logits."""
    from mmengine.config import Config
    from mmengine.registry import MODELS, init_default_scope
    official = random_state_dict(official_shapes(TINY), seed=6, dtype=torch.float32)
    official_url = release_server.put(
        'TransCNN-Tiny.pth', deit_checkpoint(official, ema=shifted(official)))
    converted = tmp_path / 'converted.pth'
    run_tool('tools/model_converters/transcnn2mmhvit.py', official_url, str(converted))
    config = tmp_path / 'transcnn_tiny_in1k.py'
    config.write_text(f"_base_ = ['{REPO}/configs/transcnn_b_in1k.py']\n"
                      f"model = dict(backbone=dict(arch=dict(_delete_=True, **{TINY})),\n"
                      f"             head=dict(in_channels={TINY['embed_dims'][-1]}))\n")
    entry_file = tmp_path / 'entry.yml'
    printed = run_tool('tools/model_converters/publish_model.py', str(converted),
                       str(tmp_path / 'transcnn_tiny_in1k.pth'), '--metafile-entry',
                       str(entry_file), '--config', str(config), '--collection', 'TransCNN',
                       '--url-prefix', release_server.base + '/v1/').splitlines()
    [published] = [line for line in printed if line.startswith(str(tmp_path / 'transcnn_tiny'))]
    with open(published, 'rb') as f:
        assert osp.basename(published) == \
            f'transcnn_tiny_in1k-{hashlib.sha256(f.read()).hexdigest()[:8]}.pth'
    assert set(torch.load(published, weights_only=True)) == {'state_dict', 'meta'}

    cfg = Config.fromfile(str(config))
    init_default_scope('mmpretrain')
    params = sum(p.numel() for p in MODELS.build(cfg.model).parameters())
    url = release_server.url('v1/' + osp.basename(published))
    (release_server.root / 'v1').mkdir()
    shutil.copy(published, release_server.root / 'v1')
    [entry] = yaml.safe_load(entry_file.read_text())
    assert entry == {
        'Name': 'transcnn_tiny_in1k', 'In Collection': 'TransCNN', 'Config': str(config),
        'Metadata': {'Parameters': params}, 'Weights': url,
        'Converted From': {
            'Weights': official_url,
            'Converter': f'mmhvit convert transcnn {official_url} '
                         'transcnn_tiny_in1k.pth'}}

    x = torch.randn(2, 3, 128, 128)
    _, expected = reference_forward({k: v.double() for k, v in official.items()}, x.double(),
                                    TINY)
    logits = {}
    for source in (url, published):
        classifier = MODELS.build(dict(cfg.model, init_cfg=dict(type='Pretrained',
                                                                checkpoint=source)))
        classifier.init_weights()
        with torch.no_grad():
            logits[source] = classifier.eval()(x, mode='tensor')
    assert release_server.count('v1/' + osp.basename(published)) == 1
    assert torch.equal(logits[url], logits[published])
    assert_close(logits[url], expected.float(), 1e-5)


def test_publish_takes_the_weights_of_an_official_training_file(tmp_path):
    """A DeiT-shape file (args Namespace, optimizer, EMA copy) publishes as its plain weights."""
    weights = {'module.w': torch.randn(3, 2), 'module.b': torch.zeros(3)}
    src = tmp_path / 'checkpoint.pth'
    torch.save(deit_checkpoint(weights, ema=shifted(weights)), src)
    out = run_tool('tools/model_converters/publish_model.py', str(src), str(tmp_path / 'out.pth'),
                   '--no-hash').strip().splitlines()[-1]
    assert out == str(tmp_path / 'out.pth')
    published = torch.load(out, weights_only=True)
    assert published['meta'] == {} and list(published['state_dict']) == ['w', 'b']
    assert torch.equal(published['state_dict']['w'], weights['module.w'])


def test_metafile_names_source_and_converter_of_every_converted_classifier():
    models = yaml.safe_load(open(osp.join(REPO, 'configs', 'metafile.yml')))['Models']
    classifiers = [m for m in models if m['Name'].endswith('_in1k')]
    families = {'TransCNN': 'transcnn', 'HAT-Net': 'hatnet', 'NesT': 'nest', 'TNT': 'tnt',
                'PyramidTNT': 'ptnt'}
    assert sorted(m['In Collection'] for m in classifiers) == sorted(families)
    for model in classifiers:
        source = model['Converted From']
        url = source['Weights']
        assert url == model['Weights'], model
        script = f'tools/model_converters/{families[model["In Collection"]]}2mmhvit.py'
        assert osp.isfile(osp.join(REPO, script))
        if url.startswith('https://pan.baidu.com/'):
            # No direct URL (BaiduDisk): the converter takes the downloaded file.
            src = source['Converter'].split()[2]
            assert not src.startswith('http') and src.endswith('.pth.tar'), model
        else:
            assert url.startswith('https://github.com/'), model
            src = url
        assert source['Converter'] == f'python {script} {src} {model["Name"]}.pth', model


def test_release_page_names_every_official_file_the_configs_use():
    import glob
    import re
    zoo = open(osp.join(REPO, 'docs', 'model_zoo.md')).read()
    assert '](docs/model_zoo.md)' in open(osp.join(REPO, 'README.md')).read()
    used = set()
    for config in glob.glob(osp.join(REPO, 'configs', '*.py')):
        text = re.sub(r"'\s*\n\s*'", '', open(config).read())  # join split string literals
        used |= set(re.findall(r"https://[^'\s]+\.pth(?:\.tar)?", text))
    used |= {m['Converted From']['Weights'] for m in yaml.safe_load(
        open(osp.join(REPO, 'configs', 'metafile.yml')))['Models'] if 'Converted From' in m}
    assert len(used) == 5 and all(f'`{url}`' in zoo for url in used), used
    for family in ('transcnn', 'hatnet', 'nest', 'tnt'):
        assert f'`{family}2mmhvit.py URL ' in zoo
    assert '`ptnt2mmhvit.py ptnt_s_82.0.pth.tar ' in zoo  # BaiduDisk: no URL to give it
