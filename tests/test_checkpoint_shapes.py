"""Every file shape that the official training scripts write loads weights-only, from a path and
by URL, through ``init_cfg`` and through the converters: DeiT / TransCNN / HAT-Net ``main.py``
(``model``, ``model_ema``, ``optimizer``, ``lr_scheduler``, ``scaler``, ``epoch``, ``args`` as an
``argparse.Namespace``), timm's ``CheckpointSaver`` (TNT's ``.pth.tar``, also in torch's legacy
format), plain state dicts (the JAX-converted NesT files), ``.safetensors`` and DataParallel
``module.`` prefixes. The plain weights win over the EMA copy; a Namespace is allowed as a
container only: what it holds passes the same allowlist."""
import argparse
import io
import pickle

import pytest
import torch

from mmhvit.models.backbones import TNT, HATNet, NesT, TransCNN
from mmhvit.models.checkpoint import read_state_dict, strip_module_prefix, unwrap_state_dict
from mmhvit.models.converters.files import convert_file
from mmhvit.testing import (
    CodeRunner,
    deit_checkpoint,
    hatnet_shapes,
    random_state_dict,
    shifted,
    timm_nest,
    timm_tnt,
    tiny_arch,
    transcnn_shapes,
)

pytestmark = pytest.mark.integration


def official(family):
    """(an official-layout state dict, a tiny backbone that takes it) of ``family``."""
    torch.manual_seed(0)
    if family in ('TransCNN', 'HATNet'):
        arch = tiny_arch(family)
        shapes = (transcnn_shapes if family == 'TransCNN' else hatnet_shapes)(arch)
        cls = TransCNN if family == 'TransCNN' else HATNet
        return (random_state_dict(shapes, seed=5, dtype=torch.float32),
                cls(arch, drop_path_rate=0.))
    if family == 'TNT':
        arch = tiny_arch('TNT')
        return timm_tnt(arch).state_dict(), TNT(arch, pretrain_img_size=64, drop_path_rate=0.)
    arch = tiny_arch('NesT', depths=[1, 2, 1, 0])  # timm's three levels
    return timm_nest(arch).state_dict(), NesT(arch, pretrain_img_size=64, drop_path_rate=0.)


def timm_saver_checkpoint(tmp_path):
    """What timm's train.py (TNT's training script) saves: a real CheckpointSaver file."""
    from timm.utils import CheckpointSaver, ModelEmaV3, NativeScaler
    tmp_path.mkdir()
    model = timm_tnt(tiny_arch('TNT'))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ema = ModelEmaV3(model, decay=0.)
    with torch.no_grad():  # the EMA copy differs from the plain weights
        for param in ema.module.parameters():
            param.add_(1.)
    args = argparse.Namespace(model='tnt_s_patch16_224', lr=1e-3, epochs=300, model_ema=True,
                              amp=True, output='', device='cuda:0', scale=[0.08, 1.0])
    saver = CheckpointSaver(model, optimizer, args=args, model_ema=ema,
                            amp_scaler=NativeScaler(device='cpu'), checkpoint_dir=str(tmp_path),
                            recovery_dir=str(tmp_path), max_history=1)
    saver.save_checkpoint(epoch=299, metric=81.5)
    return tmp_path / 'last.pth.tar'


def write(shape, family, weights, tmp_path):
    """Write ``weights`` in file shape ``shape``; the file's name (as a release would have it)."""
    if shape == 'safetensors':
        from safetensors.torch import save_file
        path = tmp_path / f'{family}.safetensors'
        save_file({k: v.contiguous() for k, v in weights.items()}, str(path))
        return path
    path = tmp_path / {'timm saver': 'tnt_s_81.5.pth.tar',
                       'timm saver, legacy format': 'tnt_legacy.pth.tar'}.get(shape,
                                                                            f'{family}.pth')
    if shape == 'deit':
        torch.save(deit_checkpoint(weights, ema=shifted(weights)), path)
    elif shape.startswith('timm saver'):
        saved = torch.load(timm_saver_checkpoint(tmp_path / 'saver'), weights_only=False)
        assert set(saved) >= {'state_dict', 'state_dict_ema', 'optimizer', 'arch', 'args',
                              'amp_scaler', 'metric', 'version', 'epoch'}, set(saved)
        torch.save(saved, path, _use_new_zipfile_serialization=shape == 'timm saver')
    elif shape == 'module':  # DataParallel / DDP-wrapped weights
        torch.save({'model': {'module.' + k: v for k, v in weights.items()}}, path)
    else:
        torch.save(weights, path)
    return path


CASES = [('TransCNN', 'deit'), ('TransCNN', 'module'), ('TransCNN', 'safetensors'),
         ('HATNet', 'deit'), ('HATNet', 'plain'), ('TNT', 'timm saver'),
         ('TNT', 'timm saver, legacy format'), ('TNT', 'safetensors'), ('NesT', 'plain'),
         ('NesT', 'module'), ('NesT', 'safetensors')]
CONVERTERS = {'TransCNN': 'transcnn', 'HATNet': 'hatnet', 'TNT': 'tnt', 'NesT': 'nest'}


@pytest.mark.parametrize('family, shape', CASES)
def test_official_file_shapes_load_from_path_and_url(family, shape, release_server, tmp_path):
    weights, model = official(family)
    path = write(shape, family, weights, tmp_path)
    if shape == 'deit' or shape.startswith('timm saver'):  # torch alone refuses their `args`
        with pytest.raises(pickle.UnpicklingError, match='argparse.Namespace'):
            torch.load(path, weights_only=True)
    url = release_server.put(path.name, path.read_bytes())
    expected = model.convert_checkpoint(weights)  # the plain weights, never the EMA copy
    converted = {}
    for source in (str(path), url):
        model.init_cfg = dict(type='Pretrained', checkpoint=source)
        model.init_weights()
        loaded = model.state_dict()
        assert expected and all(torch.equal(loaded[k], v) for k, v in expected.items()), source
        dst = tmp_path / f'converted{len(converted)}.pth'
        convert_file(CONVERTERS[family], source, str(dst))
        converted[source] = torch.load(dst, weights_only=True)['state_dict']
    from_path, from_url = converted.values()
    assert from_path.keys() == from_url.keys()
    assert all(torch.equal(from_path[k], from_url[k]) for k in from_path)


def test_ema_weights_only_when_there_are_no_plain_ones(tmp_path):
    weights, _ = official('TransCNN')
    ema = shifted(weights, 2.)
    both, only_ema = tmp_path / 'both.pth', tmp_path / 'ema.pth'
    torch.save(deit_checkpoint(weights, ema=ema), both)
    torch.save({'model_ema': ema, 'epoch': 3}, only_ema)
    for path, chosen in ((both, weights), (only_ema, ema)):
        state_dict = read_state_dict(str(path))
        assert state_dict.keys() == chosen.keys()
        assert all(torch.equal(state_dict[k], v) for k, v in chosen.items())


def test_allowlisted_namespace_does_not_let_code_through(tmp_path):
    marker = tmp_path / 'code_ran'
    weights, _ = official('TransCNN')
    checkpoint = deit_checkpoint(weights)
    checkpoint['args'].resume = CodeRunner(marker)  # inside the allowed container
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    path = tmp_path / 'evil_args.pth'
    path.write_bytes(buffer.getvalue())
    with pytest.raises(pickle.UnpicklingError, match='refused .*GLOBAL posix.system'):
        read_state_dict(str(path))
    assert not marker.exists()


def test_module_prefix_is_dropped_only_when_every_key_has_it():
    tensor = torch.zeros(1)
    wrapped = {'module.backbone.stem.weight': tensor, 'module.head.fc.weight': tensor}
    # DDP around an MMPretrain classifier: both wrappers go, the head is left out
    assert list(unwrap_state_dict(wrapped)) == ['stem.weight']
    assert list(strip_module_prefix(wrapped)) == ['backbone.stem.weight', 'head.fc.weight']
    mixed = {'module.weight': tensor, 'bias': tensor}  # a layer named "module", not a wrapper
    assert strip_module_prefix(mixed) is mixed and unwrap_state_dict(mixed) is mixed
