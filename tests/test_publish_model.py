import collections
import hashlib

import pytest
import torch
from conftest import run_tool


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
