"""Checkpoints given by URL, served from 127.0.0.1 (``release_server`` in conftest.py): downloaded
once into torch's hub cache, checked against a ``-<sha256 prefix>`` name, converted on load, equal
to the same file loaded from a path, one clear error offline, and never unpickled beyond weights
at any entry point (init_cfg, converters, MMEngine's loader, tools/train.py load_from and
--resume, tools/test.py, the demo)."""
import hashlib
import io
import json
import logging
import pickle
import re
import socket

import pytest
import torch
from conftest import REPO, run_in_process, subset_options

from mmhvit.models.backbones import TransCNN
from mmhvit.models.checkpoint import read_state_dict
from mmhvit.models.checkpoint_url import (
    CheckpointDownloadError,
    CheckpointHashError,
    expected_hash_prefix,
)
from mmhvit.models.converters.files import convert_file
from mmhvit.testing import CodeRunner, assert_close, random_state_dict, tiny_arch
from mmhvit.testing import transcnn_forward as reference_forward
from mmhvit.testing import transcnn_shapes as official_shapes

pytestmark = pytest.mark.integration

CLASSIFIER = 'configs/quickstart/classifier_transcnn-q_20e_shapes.py'
TINY = tiny_arch('TransCNN')


def pretrained(checkpoint):
    model = TransCNN(TINY, drop_path_rate=0., init_cfg=dict(type='Pretrained',
                                                           checkpoint=str(checkpoint)))
    model.init_weights()
    return model.eval()


def saved_bytes(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def test_url_is_downloaded_once_converted_and_equals_the_path(release_server, tmp_path):
    official = random_state_dict(official_shapes(TINY), seed=4, dtype=torch.float32)
    data = saved_bytes({'model': official, 'epoch': 299})
    url = release_server.put('TransCNN-Tiny.pth', data)
    local = tmp_path / 'TransCNN-Tiny.pth'
    local.write_bytes(data)

    by_url = pretrained(url)
    assert release_server.count('TransCNN-Tiny.pth') == 1
    cached = release_server.cache_dir / 'TransCNN-Tiny.pth'
    assert cached.read_bytes() == data
    again = pretrained(url)  # reused from the cache: no second request
    assert release_server.count('TransCNN-Tiny.pth') == 1
    by_path = pretrained(local)

    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        outputs = [model(x) for model in (by_url, again, by_path)]
        expected, _ = reference_forward(official, x, TINY)  # the official equations
    for from_url, from_cache, from_path, ref in zip(*outputs, expected):
        assert torch.equal(from_url, from_path) and torch.equal(from_cache, from_path)
        assert_close(from_url, ref, 1e-4)


def test_hash_suffix_is_checked_against_the_sha256(release_server):
    assert expected_hash_prefix('retinanet_r50_fpn_1x_coco_20200130-c2398f9e.pth') == 'c2398f9e'
    assert expected_hash_prefix('x-1234abcd.pth.tar') == '1234abcd'
    for plain_name in ('HAT-Net_Small.pth', 'TransCNN-Small.pth', 'tnt_s_81.5.pth.tar'):
        assert expected_hash_prefix(plain_name) is None
    data = saved_bytes({'state_dict': {'w': torch.arange(6.)}})
    sha = hashlib.sha256(data).hexdigest()

    good = release_server.put(f'weights-{sha[:8]}.pth', data)
    assert torch.equal(read_state_dict(good)['w'], torch.arange(6.))

    bad = release_server.put('weights-deadbeef.pth', data)
    with pytest.raises(CheckpointHashError) as info:
        read_state_dict(bad)
    message = str(info.value)
    assert bad in message and 'deadbeef' in message and sha in message
    assert sorted(p.name for p in release_server.cache_dir.iterdir()) == [
        f'weights-{sha[:8]}.pth']  # neither the bad file nor a partial download is kept

    cached = release_server.cache_dir / f'weights-{sha[:8]}.pth'
    cached.write_bytes(data[:-10] + bytes(10))  # a damaged cached copy is not trusted either
    with pytest.raises(CheckpointHashError, match=f'cached copy {cached}'):
        read_state_dict(good)


def test_unreachable_url_gives_one_error_naming_it(release_server):
    with socket.socket() as sock:  # a port that nobody listens on: what no network looks like
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    offline = f'http://127.0.0.1:{port}/releases/TransCNN-Small.pth'
    with pytest.raises(CheckpointDownloadError) as info:
        pretrained(offline)
    message = str(info.value)
    assert offline in message and 'refused' in message.lower()
    assert f'wget {offline}' in message and 'local path' in message and 'checkpoint=' in message
    assert str(release_server.cache_dir / 'TransCNN-Small.pth') in message

    missing = release_server.url('no_such_file.pth')
    with pytest.raises(CheckpointDownloadError,
                       match=f'{missing}: the server answered HTTP Error 404'):
        read_state_dict(missing)


# --- a code-running pickle by URL, at every entry point -------------------------------------------
@pytest.fixture
def hostile_url(release_server, tmp_path):
    marker = tmp_path / 'code_ran'
    url = release_server.put('evil.pth', {'state_dict': {'w': torch.ones(1)},
                                          'payload': CodeRunner(marker)})
    yield url
    assert not marker.exists(), 'a checkpoint given by URL ran code'


def test_library_entry_points_refuse_a_code_running_url(hostile_url, monkeypatch):
    from mmengine.runner import checkpoint as mmengine_checkpoint
    from mmengine.runner.checkpoint import _load_checkpoint
    refused = f'refused to load checkpoint {hostile_url}'
    loads = {
        'read_state_dict': lambda: read_state_dict(hostile_url),
        'init_cfg Pretrained': lambda: pretrained(hostile_url),
        # MMEngine's own loader, as mmdet / mmseg / mmpretrain models and the Runner call it
        'MMEngine CheckpointLoader': lambda: _load_checkpoint(hostile_url, map_location='cpu'),
        # a name resolved to a URL by MMEngine (open-mmlab://, torchvision://, mmcls://)
        'open-mmlab://': lambda: _load_checkpoint('open-mmlab://evil', map_location='cpu'),
    }
    monkeypatch.setattr(mmengine_checkpoint, 'get_external_models', lambda: {'evil': hostile_url})
    for family in ('transcnn', 'hatnet', 'nest', 'tnt', 'ptnt'):
        loads[f'mmhvit convert {family}'] = lambda f=family: convert_file(f, hostile_url,
                                                                          '/dev/null')
    for name, load in loads.items():
        with pytest.raises(pickle.UnpicklingError, match=refused):
            load()


@pytest.fixture
def mmengine_indexes(monkeypatch, tmp_path):
    """MMEngine's name -> URL indexes, filled by the test (MMENGINE_HOME in the test's folder)."""
    from mmengine.runner import checkpoint as mmengine_checkpoint
    indexes = {'get_torchvision_models': {}, 'get_external_models': {}, 'get_mmcls_models': {},
               'get_deprecated_model_names': {}}
    for function, index in indexes.items():
        monkeypatch.setattr(mmengine_checkpoint, function, lambda index=index: dict(index))
    monkeypatch.setenv('MMENGINE_HOME', str(tmp_path / 'mmengine_home'))
    return indexes


# MMEngine's download schemes: the index each resolves its names with
SCHEMES = {'torchvision://': 'get_torchvision_models', 'modelzoo://': 'get_torchvision_models',
           'open-mmlab://': 'get_external_models', 'openmmlab://': 'get_external_models',
           'mmcls://': 'get_mmcls_models'}


@pytest.mark.parametrize('scheme', ['http(s)://', *SCHEMES])
def test_every_download_scheme_of_mmengine_loads_weights_only(scheme, hostile_url,
                                                              release_server, mmengine_indexes):
    from mmengine.runner.checkpoint import CheckpointLoader
    weights = {'backbone.w': torch.arange(3.), 'head.b': torch.ones(1)}
    good_url = release_server.put('good.pth', {'state_dict': weights})
    if scheme == 'http(s)://':
        evil, good = hostile_url, good_url
    else:
        mmengine_indexes[SCHEMES[scheme]].update(evil=hostile_url, good=good_url)
        evil, good = scheme + 'evil', scheme + 'good'
    with pytest.raises(pickle.UnpicklingError, match=f'refused to load checkpoint {hostile_url}'):
        CheckpointLoader.load_checkpoint(evil, map_location='cpu')
    loaded = CheckpointLoader.load_checkpoint(good, map_location='cpu')['state_dict']
    # mmcls:// keeps the backbone without its prefix, as MMEngine's loader does
    expected = {'w': weights['backbone.w']} if scheme == 'mmcls://' else weights
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], v) for k, v in expected.items())


class LoggedMessages(logging.Handler):
    """What MMEngine's current logger logs while attached (its own handlers print to the stdout
    of the logger's creation, which a test's capsys may not see)."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def mmengine_log():
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    handler = LoggedMessages()
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def test_open_mmlab_names_local_files_and_deprecated_names(mmengine_indexes, tmp_path,
                                                           mmengine_log):
    """open-mmlab:// as MMEngine resolves it: an index entry that is not a URL is a file in
    MMEngine's cache folder; a deprecated name loads its successor, with a warning."""
    from mmengine.runner.checkpoint import CheckpointLoader
    home = tmp_path / 'mmengine_home'
    (home / 'weights').mkdir(parents=True)
    torch.save({'state_dict': {'w': torch.arange(4.)}}, home / 'weights' / 'new.pth')
    marker = tmp_path / 'code_ran'
    torch.save({'payload': CodeRunner(marker)}, home / 'weights' / 'evil.pth')
    mmengine_indexes['get_external_models'].update(new='weights/new.pth', evil='weights/evil.pth',
                                                   gone='weights/gone.pth')
    mmengine_indexes['get_deprecated_model_names']['old'] = 'new'

    loaded = CheckpointLoader.load_checkpoint('open-mmlab://old', map_location='cpu')
    assert torch.equal(loaded['state_dict']['w'], torch.arange(4.))
    assert 'open-mmlab://old is deprecated in favor of open-mmlab://new' in mmengine_log
    refused = 'refused to load checkpoint open-mmlab://evil'
    with pytest.raises(pickle.UnpicklingError, match=refused):
        CheckpointLoader.load_checkpoint('open-mmlab://evil', map_location='cpu')
    assert not marker.exists()
    with pytest.raises(FileNotFoundError, match=re.escape(str(home / 'weights' / 'gone.pth'))):
        CheckpointLoader.load_checkpoint('openmmlab://gone', map_location='cpu')


def test_unknown_model_name_gets_one_clear_error(mmengine_indexes):
    from mmengine.runner.checkpoint import CheckpointLoader
    mmengine_indexes['get_torchvision_models']['resnet50'] = 'http://127.0.0.1:9/resnet50.pth'
    with pytest.raises(ValueError, match='torchvision://resnet5: MMEngine has no model of that '
                                         r'name .* Did you mean torchvision://resnet50\?'):
        CheckpointLoader.load_checkpoint('torchvision://resnet5', map_location='cpu')


def test_importing_mmhvit_replaces_nothing_of_mmengine():
    """The weights-only loaders are registered through CheckpointLoader's public table only:
    MMEngine's own ``load_from_http`` stays what its module defines."""
    import mmengine.runner.checkpoint as mmengine_checkpoint

    import mmhvit  # noqa: F401
    from mmhvit.models.checkpoint import register_url_loaders
    register_url_loaders()  # again, as a second import path would
    loader = mmengine_checkpoint.load_from_http
    assert (loader.__module__, loader.__name__) == ('mmengine.runner.checkpoint', 'load_from_http')


def test_convert_command_answers_a_code_running_url_with_one_line(hostile_url, tmp_path,
                                                                  capsys):
    from mmhvit.cli import main
    dst = tmp_path / 'out.pth'
    with pytest.raises(SystemExit) as exit_info:
        main(['convert', 'tnt', hostile_url, str(dst)])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 1 and not out and not dst.exists()
    assert len(err.splitlines()) == 1
    assert err.startswith(f'error: refused to load checkpoint {hostile_url}')


@pytest.mark.parametrize('entry', ['train load_from', 'train --resume', 'test', 'demo'])
def test_tools_refuse_a_code_running_url(entry, hostile_url, tiny_shapes, tmp_path, capsys):
    work_dir = tmp_path / 'work'
    options = subset_options('classifier', tiny_shapes, work_dir, f'url_{entry}'.replace(' ', '_'))
    refused = f'refused to load checkpoint {hostile_url}'
    if entry == 'demo':
        from mmhvit.apis import infer_image
        image = sorted((tiny_shapes / 'crops' / 'val' / 'square').glob('*.png'))[0]
        with pytest.raises(pickle.UnpicklingError, match=refused):
            infer_image(str(image), f'{REPO}/{CLASSIFIER}', hostile_url, device='cpu')
        return
    args = {
        'train load_from': ('tools/train.py', CLASSIFIER, '--work-dir', str(work_dir),
                            '--cfg-options', *options, f'load_from={hostile_url}'),
        'train --resume': ('tools/train.py', CLASSIFIER, '--work-dir', str(work_dir), '--resume',
                           hostile_url, '--cfg-options', *options),
        'test': ('tools/test.py', CLASSIFIER, hostile_url, '--work-dir', str(work_dir),
                 '--cfg-options', *options),
    }[entry]
    with pytest.raises(SystemExit) as exit_info:  # the tool's one line, no traceback
        run_in_process(*args)
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith('error: ' + refused)


def test_test_tool_and_demo_load_weights_by_url(release_server, tiny_shapes, tmp_path, capsys):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS

    from mmhvit.apis import infer_image
    cfg = Config.fromfile(f'{REPO}/{CLASSIFIER}')
    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    classifier = MODELS.build(cfg.model)
    url = release_server.put('classifier_transcnn-q.pth', {
        'state_dict': classifier.state_dict(),
        'meta': {'dataset_meta': {'classes': list(cfg.classes)}}})
    metrics_file = tmp_path / 'metrics.json'
    run_in_process('tools/test.py', CLASSIFIER, url, '--work-dir', str(tmp_path / 'work'),
                   '--metrics-out', str(metrics_file), '--cfg-options',
                   *subset_options('classifier', tiny_shapes, tmp_path / 'work', 'url_test_ok'))
    assert 'accuracy/top1' in json.loads(metrics_file.read_text())
    image = sorted((tiny_shapes / 'crops' / 'val' / 'square').glob('*.png'))[0]
    printed = infer_image(str(image), f'{REPO}/{CLASSIFIER}', url, device='cpu')
    assert printed.startswith('class ') and 'score ' in printed
    assert release_server.count('classifier_transcnn-q.pth') == 1  # the demo used the cache
