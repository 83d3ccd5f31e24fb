"""Property tests (hypothesis) of every family over input sizes 1..700, batches 1..3 and memory
layouts: output shapes, finite values, layout invariance, and padding invariance.

Padding invariance holds for the padding a backbone adds itself (to whole windows, blocks or
patches): it is masked, so filling it with garbage changes no output. It does not hold for zero
padding added to the image by the user (or by a detector's batch collation): the padded pixels
become real tokens that attention reads (TransCNN's pooled global keys, NesT's blocks and its
interpolated block position embeddings, TNT's and PyramidTNT's global sentence attention and
PyramidTNT's resized position tables, HAT-Net's GroupNorm statistics over the whole map), as for
any ViT or Swin backbone; docs/reliability.md gives the size of that effect.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmhvit.testing import FAMILIES, TINY_ARCHS, poison_padding

pytestmark = pytest.mark.unit

NAMES = sorted(FAMILIES)
STRIDES = (4, 8, 16, 32)
# Deterministic examples (CI reproducible), no example database in the repository.
PROPERTY = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope='module')
def models():
    built = {}
    for name in NAMES:
        torch.manual_seed(0)
        model = FAMILIES[name](**{**TINY_ARCHS[name], 'drop_path_rate': 0.})
        model.init_weights()
        built[name] = model.eval()
    return built


def with_layout(x, layout):
    if layout == 'channels_last':
        return x.contiguous(memory_format=torch.channels_last)
    if layout == 'strided':  # every other column of a wider tensor
        wide = torch.zeros(*x.shape[:-1], 2 * x.shape[-1])
        wide[..., ::2] = x
        return wide[..., ::2]
    if layout == 'transposed':  # an NCWH tensor seen as NCHW
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    return x


sizes = st.integers(min_value=1, max_value=700)


@pytest.mark.parametrize('name', NAMES)
@PROPERTY
@given(height=sizes, width=sizes, batch=st.integers(1, 3),
       layout=st.sampled_from(['channels_last', 'strided', 'transposed']))
def test_any_size_and_layout(models, name, height, width, batch, layout):
    model = models[name]
    x = torch.randn(batch, 3, height, width)
    with torch.no_grad():
        outs = model(x)
        outs_in_layout = model(with_layout(x, layout))
    assert len(outs) == 4
    for out, same, stride, channels in zip(outs, outs_in_layout, STRIDES, model.stage_channels):
        assert out.shape == (batch, channels, math.ceil(height / stride),
                             math.ceil(width / stride))
        assert torch.isfinite(out).all()
        torch.testing.assert_close(same, out, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', ['TransCNN', 'NesT', 'HATNet'])
@PROPERTY
@given(height=st.integers(1, 300), width=st.integers(1, 300))
def test_own_padding_never_leaks(models, name, height, width, monkeypatch):
    """The padding a backbone adds to whole windows / blocks is masked: garbage in it changes no
    output (TNT pads whole sentences: tests/test_backbone_contract.py covers it; PyramidTNT pads
    no token)."""
    model = models[name]
    x = torch.randn(1, 3, height, width)
    with torch.no_grad():
        clean = model(x)
        with monkeypatch.context() as patch:
            calls = poison_padding(patch)
            poisoned = model(x)
    for a, b in zip(poisoned, clean):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    if (height % 128 or width % 128) and min(height, width) > 64:
        assert calls, 'an odd size was not padded: the poisoning proved nothing'


@pytest.mark.parametrize('name', NAMES)
def test_user_zero_padding_effect(models, name, capsys):
    """Zero padding by the user is not invisible (see the module docstring); its effect over the
    original area is measured here and stays smaller than the output itself."""
    model = models[name]
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = model(x)
        padded = model(F.pad(x, (0, 32, 0, 32)))
    changes = [((p[..., :o.shape[2], :o.shape[3]] - o).norm() / o.norm()).item()
               for o, p in zip(plain, padded)]
    with capsys.disabled():
        print(f'\n[reliability] {name}: relative change over the original 64x96 area after '
              'zero-padding 32 px bottom/right, per output: ' +
              ', '.join(f'{c:.1e}' for c in changes))
    assert all(0 < c < 1 for c in changes), changes
