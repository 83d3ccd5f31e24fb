"""One image, any task: the config picks MMDet's, MMSeg's or MMPretrain's inferencer.

Used by ``demo/image_demo.py`` and ``mmhvit demo``.
"""
import os
import os.path as osp
import shutil
import tempfile
from typing import Optional

import numpy as np
from mmengine.config import Config

from mmhvit.models.checkpoint import training_checkpoint_globals

# default_scope -> (module, inferencer class, keyword of its checkpoint argument)
INFERENCERS = {
    'mmdet': ('mmdet.apis', 'DetInferencer', 'weights'),
    'mmseg': ('mmseg.apis', 'MMSegInferencer', 'weights'),
    'mmpretrain': ('mmpretrain.apis', 'ImageClassificationInferencer', 'pretrained'),
}


def task_of(cfg: Config) -> str:
    """The library (``mmdet``, ``mmseg`` or ``mmpretrain``) whose inferencer runs ``cfg``.

    ``default_scope`` decides; a config without one is placed by the registry that knows its
    model type.
    """
    scope = cfg.get('default_scope')
    if scope in INFERENCERS:
        return scope
    model_type = cfg.get('model', {}).get('type')
    found = []
    for name in INFERENCERS:
        registry = __import__(f'{name}.registry', fromlist=['MODELS']).MODELS
        __import__(f'{name}.models')  # registers the library's models
        if model_type is not None and registry.get(model_type) is not None:
            found.append(name)
    if len(found) == 1:
        return found[0]
    raise ValueError(
        f'cannot tell the task of {cfg.filename}: default_scope is {scope!r} and model type '
        f'{model_type!r} is a model of {found or "none"} of {sorted(INFERENCERS)}; set '
        'default_scope to one of them')


def _summary(task: str, result: dict, classes, score_thr: float) -> str:

    def name(i):
        return classes[i] if classes is not None and i < len(classes) else str(i)

    if task == 'mmdet':
        pred = result['predictions'][0]
        kept = [i for i, s in enumerate(pred['scores']) if s >= score_thr]
        lines = [f'{len(kept)} objects with score >= {score_thr} '
                 f'({len(pred["scores"])} candidates)']
        for i in kept[:10]:
            box = ', '.join(f'{v:.0f}' for v in pred['bboxes'][i])
            lines.append(f'  {name(pred["labels"][i])}: {pred["scores"][i]:.3f} at [{box}]')
        return '\n'.join(lines)
    if task == 'mmseg':
        seg = np.asarray(result['predictions'])
        labels, counts = np.unique(seg, return_counts=True)
        order = np.argsort(-counts)
        parts = [f'{name(int(labels[i]))} {counts[i] / seg.size:.1%}' for i in order]
        return f'{seg.shape[1]}x{seg.shape[0]} label map: ' + ', '.join(parts)
    pred = result[0]
    label = pred['pred_label']
    return f'class {label} ({name(label)}), score {pred["pred_score"]:.3f}'


def check_image_file(image: str) -> np.ndarray:
    """The pixels of the image file ``image``, as stored; one clear error when it is missing, is
    not an image, or holds NaN / Inf values (a float TIFF can).

    The backbones do not look at their inputs' values (that would synchronise a GPU with the host
    on every forward): this is where a user's image enters, so this is where it is checked.
    """
    if not osp.isfile(image):
        raise FileNotFoundError(f'no such image: {image}')
    import mmcv
    pixels = mmcv.imread(image, flag='unchanged')  # float images keep their values
    if pixels is None:
        raise ValueError(f'{image} is not an image that OpenCV can read')
    finite = np.isfinite(pixels) if np.issubdtype(pixels.dtype, np.floating) else None
    if finite is not None and not finite.all():
        raise ValueError(f'image {image} has {finite.size - int(finite.sum())} NaN or Inf values '
                         f'(of {finite.size}); the model needs finite pixels')
    return pixels


def infer_image(image: str, config: str, checkpoint: Optional[str] = None,
                out_file: Optional[str] = None, device: Optional[str] = None,
                score_thr: float = 0.3) -> str:
    """Run ``config`` with ``checkpoint``'s weights on ``image``; draw the result in ``out_file``.

    Args:
        image: path of the input image.
        config: path of an MMDet, MMSeg or MMPretrain config.
        checkpoint: weights, a path or an ``http(s)://`` URL (downloaded once into torch's hub
            cache), loaded weights-only (training checkpoints too: MMEngine's logged types are
            allowlisted, as in tools/test.py). None: the config's own init.
        out_file: where the drawing goes (its extension picks the format); None draws nothing.
        device: ``cpu``, ``cuda``, ...; None picks a GPU when there is one.
        score_thr: detections below this score are neither drawn nor listed.

    Returns:
        The printable result: boxes with classes and scores, a label map's class fractions or
        the predicted class.
    """
    check_image_file(image)
    if checkpoint is not None and not osp.isfile(checkpoint) and '://' not in checkpoint:
        raise FileNotFoundError(f'no such checkpoint: {checkpoint}')
    cfg = Config.fromfile(config)
    task = task_of(cfg)
    module, name, weights_kw = INFERENCERS[task]
    inferencer_cls = getattr(__import__(module, fromlist=[name]), name)
    kwargs = {weights_kw: checkpoint if checkpoint is not None else
              (False if task == 'mmpretrain' else None), 'device': device}
    if task == 'mmdet':
        kwargs['show_progress'] = False
    # Weights-only, with the types of MMEngine training checkpoints allowlisted (as tools/test.py):
    # a published or a training checkpoint loads, a file that would run code is refused.
    with training_checkpoint_globals():
        inferencer = inferencer_cls(model=cfg, **kwargs)

    with tempfile.TemporaryDirectory() as tmp:
        vis_dir = osp.join(tmp, 'vis')
        if task == 'mmdet':
            result = inferencer(image, out_dir=tmp if out_file else '', no_save_pred=True,
                                pred_score_thr=score_thr)
        elif task == 'mmseg':
            result = inferencer(image, out_dir=tmp if out_file else '')
        else:
            result = inferencer(image, show_dir=vis_dir if out_file else None)
        if out_file:
            drawn = os.listdir(vis_dir)
            assert len(drawn) == 1, drawn  # one input image, one drawing
            import mmcv
            out_dir = osp.dirname(osp.abspath(out_file))
            os.makedirs(out_dir, exist_ok=True)
            if osp.splitext(out_file)[1].lower() == osp.splitext(drawn[0])[1].lower():
                shutil.copyfile(osp.join(vis_dir, drawn[0]), out_file)
            else:
                mmcv.imwrite(mmcv.imread(osp.join(vis_dir, drawn[0])), out_file)
    # MMPretrain keeps the classes on the inferencer, MMDet and MMSeg on the model
    classes = getattr(inferencer, 'classes', None) or (
        getattr(inferencer.model, 'dataset_meta', None) or {}).get('classes')
    return _summary(task, result, classes, score_thr)
