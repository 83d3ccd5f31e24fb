"""Comparisons and fault injection shared by the tests."""
import sys

import torch


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tol: float) -> None:
    """Same shape, and ``max |actual - expected| <= tol * max(max |expected|, 1)``."""
    scale = expected.abs().max().item()
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert (actual - expected).abs().max().item() <= tol * max(scale, 1.), (
        (actual - expected).abs().max().item(), scale)


def poison_padding(monkeypatch, value: float = 1e3) -> list:
    """Make every ``pad_nhwc`` of the package fill its padding with ``value`` instead of zeros
    (through pytest's ``monkeypatch``); returns a list that counts the padding calls (a test can
    check that padding happened)."""
    from mmhvit.models.layers import windows
    original = windows.pad_nhwc
    calls = []

    def pad_with_garbage(x, pad_h, pad_w):
        out = original(x, pad_h, pad_w)
        if pad_h or pad_w:
            calls.append((pad_h, pad_w))
            out = out.clone()
            out[:, x.shape[1]:] = value
            out[:, :, x.shape[2]:] = value
        return out

    for name, module in list(sys.modules.items()):
        if name.startswith('mmhvit') and getattr(module, 'pad_nhwc', None) is original:
            monkeypatch.setattr(module, 'pad_nhwc', pad_with_garbage)
    return calls
