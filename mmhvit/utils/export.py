"""Export of backbones and whole models to ONNX, and the checks that the export is faithful.

The TorchScript exporter (``torch.onnx.export(..., dynamo=False)``) traces the model; while it
does, the layers of :mod:`mmhvit.models.layers` take export-friendly forms (no branch on sizes,
matmul attention with an additive finite mask, no ceil-mode pooling; see
:func:`mmhvit.models.layers.is_exporting`), so one graph with dynamic batch, height and width
gives the eager model's numbers at every input size. ``export_onnx(..., attn_chunk=N)`` also
bounds the attention logits that exist at once (query chunks in an ONNX ``Loop``).
"""
import inspect
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from mmengine.runner import load_checkpoint
from mmengine.structures import InstanceData

from mmhvit.models.layers import export_attention_chunk

OPSET = 17
DYNAMIC_AXES = {0: 'batch', 2: 'height', 3: 'width'}


class TensorForward(nn.Module):
    """The model's ``mode='tensor'`` forward (backbone, neck and heads, no post-processing)."""

    def __init__(self, model, data_samples=None):
        super().__init__()
        self.model = model
        self.data_samples = data_samples

    def forward(self, inputs):
        head = getattr(self.model, 'decode_head', None)
        if self.data_samples is not None and head is not None and (
                'batch_data_samples' in inspect.signature(head.forward).parameters):
            # MMSeg's tensor mode calls decode_head.forward(maps) alone; its Mask2Former head
            # reads the batch's image shapes from the samples
            return head.forward(self.model.extract_feat(inputs), self.data_samples)
        return self.model(inputs, self.data_samples, mode='tensor')


def synthetic_data_samples(scope: str, height: int, width: int):
    """Two-stage detectors and MMSeg's Mask2Former read image shapes from data samples even in
    tensor mode."""
    if scope == 'mmseg':
        from mmseg.structures import SegDataSample
        return [SegDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width),
                                            pad_shape=(height, width),
                                            batch_input_shape=(height, width)))]
    if scope != 'mmdet':
        return None
    from mmdet.structures import DetDataSample
    sample = DetDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width),
                                         pad_shape=(height, width), scale_factor=(1., 1.),
                                         batch_input_shape=(height, width)))
    sample.gt_instances = InstanceData()
    return [sample]


def build_export_model(config, checkpoint: Optional[str] = None,
                       backbone_only: bool = False) -> Tuple[nn.Module, str]:
    """The module to export from a config: ``(module, what)`` with ``what`` 'backbone' or
    'tensor' (the whole model in tensor mode).

    Classifier configs (MMPretrain) give their backbone; other models (detectors) give
    :class:`TensorForward` of the whole model unless ``backbone_only``. The checkpoint, if any,
    is loaded into the whole model first; without one the weights stay random (the backbone's
    ``init_cfg`` is dropped so that nothing is downloaded).
    """
    cfg = config if isinstance(config, Config) else Config.fromfile(config)
    scope = cfg.get('default_scope', 'mmengine')
    init_default_scope(scope)
    model_cfg = cfg.model.copy()
    if 'backbone' not in model_cfg:
        raise ValueError(f'config model {model_cfg.get("type")!r} has no backbone: the exporter '
                         'takes classifier, detector and segmentor configs')
    model_cfg.backbone = dict(model_cfg.backbone)
    model_cfg.backbone.pop('init_cfg', None)
    model_cfg.backbone.pop('pretrained', None)
    model = MODELS.build(model_cfg)
    if checkpoint:
        load_checkpoint(model, checkpoint, map_location='cpu')
    model.eval()
    if backbone_only or scope == 'mmpretrain':
        return model.backbone, 'backbone'
    return TensorForward(model).eval(), 'tensor'


def flatten_outputs(outputs) -> List[torch.Tensor]:
    """Nested tuples/lists of tensors -> flat list, in the order the ONNX exporter uses."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return [t for item in outputs for t in flatten_outputs(item)]


def export_onnx(module: nn.Module, path: str, shape: Sequence[int], dynamic: bool = True,
                batch: int = 1, opset: int = OPSET,
                attn_chunk: Optional[int] = None) -> Dict[str, object]:
    """Export ``module`` (NCHW image in, nested tensors out) to ``path``; returns the output
    names and the export time in seconds.

    ``attn_chunk``: attention of more queries than this runs in chunks of that many queries (an
    ONNX ``Loop``, :func:`~mmhvit.models.layers.export_attention_chunk`); None: whole.
    """
    if dynamic:
        check_dynamic_export(module)
    height, width = shape
    example = torch.randn(batch, 3, height, width)
    with torch.no_grad():
        num_outputs = len(flatten_outputs(module(example)))
    output_names = [f'output{i}' for i in range(num_outputs)]
    dynamic_axes = None
    if dynamic:
        dynamic_axes = {'input': DYNAMIC_AXES, **{name: DYNAMIC_AXES for name in output_names}}
    start = time.perf_counter()
    with torch.no_grad(), export_attention_chunk(attn_chunk):
        torch.onnx.export(module, (example, ), path, opset_version=opset, dynamo=False,
                          input_names=['input'], output_names=output_names,
                          dynamic_axes=dynamic_axes, do_constant_folding=True)
    return dict(output_names=output_names, seconds=time.perf_counter() - start)


def check_dynamic_export(module: nn.Module) -> None:
    """Raise if ``module`` holds a layer whose graph depends on the input size, so that one
    dynamic-shape graph cannot serve every size."""
    from mmhvit.models.layers import HMHSA
    for name, layer in module.named_modules():
        if isinstance(layer, HMHSA) and layer.mode == 'iterative' and layer.grid_size > 1:
            raise ValueError(f'{name}: iterative H-MHSA runs as many steps as the input size '
                             'needs, so it exports at a fixed size only: export without '
                             "dynamic axes, or use attn_mode='official'")


def ort_session(path: str, threads: Optional[int] = None):
    """An ONNX Runtime CPU session of an exported file."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])


def compare_with_onnx(module: nn.Module, session, inputs: torch.Tensor, rtol: float = 1e-3,
                      atol: float = 1e-4) -> float:
    """Run PyTorch and ONNX Runtime on ``inputs``; raises AssertionError if an output differs in
    shape or beyond ``np.testing.assert_allclose(rtol, atol)``; returns the max abs difference."""
    with torch.no_grad():
        expected = [t.numpy() for t in flatten_outputs(module(inputs))]
    actual = session.run(None, {session.get_inputs()[0].name: inputs.numpy()})
    assert len(actual) == len(expected), f'{len(actual)} ONNX outputs, {len(expected)} expected'
    worst = 0.
    for i, (got, want) in enumerate(zip(actual, expected)):
        assert got.shape == want.shape, f'output {i}: ONNX {got.shape}, PyTorch {want.shape}'
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f'output {i}')
        worst = max(worst, float(np.abs(got - want).max()))
    return worst
