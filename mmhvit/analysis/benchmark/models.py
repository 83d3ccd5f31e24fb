"""The models the benchmark measures: each family's ImageNet classifier and backbone, the
references they are timed against (timm, the official TransCNN and HAT-Net) and the scaling
baselines."""
import copy
import functools
import importlib.util
import os.path as osp
import sys
import tempfile
import time
from typing import Callable, Dict, Optional

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmhvit.models.converters.files import convert_file

REPO = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

# Official figures (../shared/docs/REFERENCE.md; papers): params in M with a 1000-class head,
# GFLOPs as the papers count them, ImageNet top-1. ``size``: the pretraining input side;
# ``converter``: the family's key of ``mmhvit convert`` (mmhvit.models.converters.files).
# HAT-Net: the official params count its unused attn.proj_norm (tests/test_hatnet.py).
FAMILIES = {
    'TransCNN': dict(
        config='configs/transcnn_b_in1k.py', size=256, type='mmhvit.TransCNN',
        converter='transcnn',
        archs={'tiny': (13.316, None, 80.4), 'small': (26.539, None, 83.1),
               'medium': (48.323, None, 83.8), 'large': (80.033, None, 84.2)}),
    'HAT-Net': dict(
        config='configs/hatnet_s_in1k.py', size=224, type='mmhvit.HATNet', converter='hatnet',
        archs={'tiny': (12.66, 2.0, 79.8), 'small': (25.75, 4.3, 82.6),
               'medium': (42.94, 8.3, 84.0), 'large': (63.13, 11.5, 84.2)}),
    'NesT': dict(
        config='configs/nest_t_in1k.py', size=224, type='mmhvit.NesT', converter='nest',
        archs={'tiny': (17.06, 5.8, 81.5), 'small': (38.35, 10.4, 83.3),
               'base': (67.72, 17.9, 83.8)}),
    'TNT': dict(
        config='configs/tnt_s_in1k.py', size=224, type='mmhvit.TNT', converter='tnt',
        archs={'tiny': (6.1, 1.4, 73.9), 'small': (23.77, 5.2, 81.5),
               'base': (65.43, 14.1, 82.9)}),
    'PyramidTNT': dict(
        config='configs/ptnt_s_in1k.py', size=256, arch_sizes={'tiny': 192},
        type='mmhvit.PyramidTNT', converter='ptnt',
        archs={'tiny': (10.6, 0.6, 75.2), 'small': (32.0, 3.3, 82.0),
               'medium': (85.0, 8.2, 83.5), 'base': (157.0, 16.0, 84.1)}),
}
# The H-MHSA releases (yun-liu/HAT-Net) the speed section times Small against: the released file,
# its constructor of the Small model, and the restatement of its computation (mmhvit.testing).
OFFICIAL_HMHSA = {
    'TransCNN': dict(file='TransCNN.py', constructor='TransCNN_Small',
                     restated='OfficialTransCNN'),
    'HAT-Net': dict(file='HAT_Net.py', constructor='HAT_Net_small', restated='OfficialHATNet'),
}
SCALING_SIZES = ('224x224', '448x448', '640x640', '800x1344', '1024x1024')
SCALING_ARCHS = {'TransCNN': 'base', 'HAT-Net': 'small', 'NesT': 'tiny', 'TNT': 'small',
                 'PyramidTNT': 'small'}
# PyramidTNT-S with its relative_pos bias made (and attended) 4096 queries at a time.
PTNT_CHUNKED = 'PyramidTNT-small, bias_chunk_size=4096'


def log(message: str) -> None:
    print(f'[benchmark {time.strftime("%H:%M:%S")}] {message}', flush=True)


def classifier_config(family: str, arch) -> Config:
    cfg = Config.fromfile(osp.join(REPO, FAMILIES[family]['config']))
    cfg.model.backbone.arch = arch
    cfg.model.backbone.pop('init_cfg', None)
    return cfg


def build_classifier(family: str, arch) -> nn.Module:
    """The MMPretrain ImageClassifier of the ImageNet config, with ``arch`` and a matching head."""
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    cfg = classifier_config(family, arch)
    backbone = MODELS.build(copy.deepcopy(cfg.model.backbone))
    size = FAMILIES[family]['size']
    with torch.no_grad():
        feature = backbone(torch.zeros(1, 3, size, size))[-1]
    cfg.model.head.in_channels = feature.shape[1]
    model = MODELS.build(cfg.model).eval()
    model.init_weights()
    return model


def build_backbone(family: str, arch, **overrides) -> nn.Module:
    from mmhvit.registry import MODELS
    return MODELS.build(dict(type=FAMILIES[family]['type'], arch=arch, **overrides))


class TensorMode(nn.Module):
    """An MMPretrain classifier as a plain image -> logits module."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, mode='tensor')


def official_hmhsa(family: str, path: Optional[str]) -> nn.Module:
    """TransCNN-Small or HAT-Net-Small (``family``) as the official code builds it: the released
    file at ``path`` (``TransCNN.py``'s ``TransCNN_Small`` / ``HAT_Net.py``'s ``HAT_Net_small``,
    norms randomised), or without a path the restatement of its computation
    (:class:`mmhvit.testing.OfficialTransCNN` / :class:`~mmhvit.testing.OfficialHATNet`,
    official key names, random weights)."""
    spec = OFFICIAL_HMHSA[family]
    if path is None:
        import mmhvit.testing
        from mmhvit.registry import MODELS
        arch = MODELS.get(FAMILIES[family]['type']).arch_zoo['small']
        return getattr(mmhvit.testing, spec['restated'])(arch).eval()
    model = getattr(load_release(osp.abspath(path)), spec['constructor'])().eval()
    randomize_norms(model)
    return model


@functools.lru_cache(maxsize=None)
def load_release(path: str):
    """A released model file as a module, once a process: the official files register their
    models with timm's ``register_model``, which finds the module in ``sys.modules`` (and warns
    when a name is registered again)."""
    name = 'official_release_' + osp.splitext(osp.basename(path))[0]
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def randomize_norms(model: nn.Module) -> None:
    """Non-trivial norms (BatchNorm statistics and affine, GroupNorm affine), so that a mis-loaded
    norm shows in the logits."""
    gen = torch.Generator().manual_seed(0)
    ranges = (('running_mean', (-.3, .3)), ('running_var', (.5, 2.)), ('weight', (.5, 1.5)),
              ('bias', (-.3, .3)))
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            for name, (low, high) in ranges:
                tensor = getattr(m, name, None)  # GroupNorm: no running statistics
                if tensor is not None:
                    tensor.data.copy_(torch.rand(tensor.shape, generator=gen) * (high - low) + low)


def reference_pair(family: str, official_path: Optional[str] = None):
    """(reference model, our classifier with its weights converted by our converter tool, input
    side, reference name): timm's NesT-T / TNT-S, the official TransCNN-Small / HAT-Net-Small
    (``official_path``: the released file, see :func:`official_hmhsa`) at its pretraining size."""
    if family in OFFICIAL_HMHSA:
        reference = official_hmhsa(family, official_path)
        name = (f'official {OFFICIAL_HMHSA[family]["file"]}' if official_path else
                'official equations (restated)')
        arch, size = 'small', FAMILIES[family]['size']
    else:
        import timm
        timm_name, arch = {'NesT': ('nest_tiny_jx', 'tiny'),
                           'TNT': ('tnt_s_patch16_224', 'small')}[family]
        reference = timm.create_model(timm_name, pretrained=False).eval()
        name, size = 'timm', 224
    ours = build_classifier(family, arch)
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(reference.state_dict(), osp.join(tmp, 'reference.pth'))
        convert_file(FAMILIES[family]['converter'], osp.join(tmp, 'reference.pth'),
                     osp.join(tmp, 'ours.pth'))
        state = torch.load(osp.join(tmp, 'ours.pth'), map_location='cpu')['state_dict']
    missing, unexpected = ours.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f'converted {family} does not fit: {missing} {unexpected}')
    return reference, TensorMode(ours).eval(), size, name


class PlainViT(nn.Module):
    """ViT-S/16 (timm) returning its stride-16 token map: the isotropic baseline for scaling."""

    def __init__(self):
        super().__init__()
        import timm
        self.vit = timm.create_model('vit_small_patch16_224', pretrained=False,
                                     dynamic_img_size=True, dynamic_img_pad=True, num_classes=0)

    def forward(self, x):
        return self.vit.forward_features(x)


def scaling_models(families) -> Dict[str, Callable[[], nn.Module]]:
    models = {
        f'{family}-{SCALING_ARCHS[family]}': (lambda f=family: build_backbone(f, SCALING_ARCHS[f]))
        for family in families
    }
    if 'PyramidTNT' in families:
        models[PTNT_CHUNKED] = lambda: build_backbone('PyramidTNT', 'small', bias_chunk_size=4096)
    models['ViT-S/16 (timm)'] = PlainViT
    return models
