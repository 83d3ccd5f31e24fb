"""GradCAT: the NesT paper's interpretation of a decision as a path down the block tree.

`Nested Hierarchical Transformer <https://arxiv.org/abs/2105.12723>`_, Sec. "Interpretability":
starting at the top level, score every candidate block by gradient x activation (the target logit's
gradient times the level's output, summed over channels and over the block's tokens) and descend
into the best child, until the first level. In NesT each block of level l + 1 is the parent of the
2 x 2 blocks of level l that cover the same pixels (fewer at the image border).
"""
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

LEVEL_COLORS = ((230, 25, 75), (255, 225, 25), (60, 180, 75), (0, 130, 200))
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def block_scores(score_map: torch.Tensor, block_size: int) -> torch.Tensor:
    """Sum an (h, w) token score map over blocks anchored at the top-left -> (rows, cols)."""
    height, width = score_map.shape
    pad_h, pad_w = (-height) % block_size, (-width) % block_size
    score_map = F.pad(score_map, (0, pad_w, 0, pad_h))
    rows, cols = score_map.shape[0] // block_size, score_map.shape[1] // block_size
    return score_map.view(rows, block_size, cols, block_size).sum(dim=(1, 3))


def nest_gradcat(backbone: torch.nn.Module,
                 logits_fn: Callable[[torch.Tensor], torch.Tensor],
                 image: torch.Tensor,
                 target_class: Optional[int] = None) -> Dict:
    """Walk a NesT's block tree top-down along the highest gradient x activation.

    Args:
        backbone (NesT): The backbone inside ``logits_fn``; its ImageNet levels are hooked.
        logits_fn (callable): Normalised image batch -> class logits (N, classes), running
            ``backbone`` through its three NesT levels (a classifier with ``out_indices=(2,)``).
        image (Tensor): One normalised image (1, C, H, W).
        target_class (int, optional): Class to explain; default the predicted one.

    Returns:
        dict: ``target_class``, ``logits`` (1-D) and ``path``: one dict per level, top level
        first, with ``level``, ``block`` (row, col), ``box`` (x0, y0, x1, y1) in input pixels and
        ``score``.
    """
    if image.dim() != 4 or image.shape[0] != 1:
        raise ValueError(f'GradCAT explains one image: expected (1, C, H, W), got '
                         f'{tuple(image.shape)}')
    maps, logits = _level_maps_and_logits(backbone, logits_fn, image)
    if logits.dim() != 2 or logits.shape[0] != 1:
        raise ValueError(f'logits_fn must return (1, classes) logits, got {tuple(logits.shape)}')
    num_classes = logits.shape[1]
    if target_class is None:
        target_class = int(logits[0].argmax())
    elif not 0 <= target_class < num_classes:
        raise ValueError(f'target class {target_class} is outside 0..{num_classes - 1}')
    grads = torch.autograd.grad(logits[0, target_class], maps)
    # gradient x activation, summed over channels: one (h, w) token score map per level
    scores = [(act * grad).sum(dim=1)[0].detach() for act, grad in zip(maps, grads)]
    path = _descend(scores, backbone.block_size, backbone.patch_size, image.shape[-2:])
    return dict(target_class=target_class, logits=logits[0].detach(), path=path)


def _level_maps_and_logits(backbone: torch.nn.Module, logits_fn: Callable, image: torch.Tensor
                           ) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """The map of each ImageNet level (in the autograd graph) and the logits of ``image``."""
    num_levels = backbone.pretrained_stages
    levels = list(backbone.stages)[:num_levels]
    if len(levels) < num_levels:
        raise ValueError(f'GradCAT needs all {num_levels} NesT levels; this backbone builds '
                         f'{len(levels)} (out_indices={backbone.out_indices})')
    activations = {}
    # A stage returns the map the next level takes (the final norm is the backbone's to apply).
    hooks = [
        level.register_forward_hook(
            lambda module, args, out, index=index: activations.__setitem__(index, out))
        for index, level in enumerate(levels)
    ]
    try:
        with torch.enable_grad():
            # A leaf that needs grad keeps the graph alive even when the weights are frozen.
            logits = logits_fn(image.detach().clone().requires_grad_(True))
    finally:
        for hook in hooks:
            hook.remove()
    return [activations[i] for i in range(num_levels)], logits


def _descend(scores: List[torch.Tensor], block_size: int, patch_size: int,
             image_size: Tuple[int, int]) -> List[Dict]:
    """From the top level down, the best-scoring block among the children of the last choice."""
    height, width = image_size
    path: List[Dict] = []
    rows_range = cols_range = None  # candidates: every block of the top level
    for level in reversed(range(len(scores))):
        level_scores = block_scores(scores[level], block_size)
        if rows_range is None:
            rows_range, cols_range = (0, level_scores.shape[0]), (0, level_scores.shape[1])
        candidates = level_scores[rows_range[0]:rows_range[1], cols_range[0]:cols_range[1]]
        best = int(candidates.argmax())
        row = rows_range[0] + best // candidates.shape[1]
        col = cols_range[0] + best % candidates.shape[1]
        extent = block_size * patch_size * 2**level  # block side in input pixels
        path.append(
            dict(
                level=level,
                block=(row, col),
                box=(col * extent, row * extent, min((col + 1) * extent, width),
                     min((row + 1) * extent, height)),
                score=float(level_scores[row, col])))
        # children: the 2 x 2 blocks of the level below, clipped to that level's grid
        rows_range = (2 * row, 2 * row + 2)
        cols_range = (2 * col, 2 * col + 2)
    return path


def classifier_gradcat(config: str, checkpoint: str, image: str, size: Tuple[int, int],
                       target_class: Optional[int] = None):
    """GradCAT of an MMPretrain classifier config with an ``mmhvit.NesT`` backbone on one image.

    Args:
        config: The classifier config (e.g. ``configs/nest_t_in1k.py``).
        checkpoint: Its weights.
        image: An image file, resized to ``size`` (H, W) and normalised as the config's data
            preprocessor does (ImageNet mean / std by default).
        target_class: Class to explain; default the predicted one.

    Returns:
        tuple: :func:`nest_gradcat`'s result, and the resized PIL image (to draw the path on).
    """
    import numpy as np
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from PIL import Image

    cfg = Config.fromfile(config)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    from mmpretrain.registry import MODELS
    cfg.model.backbone.pop('init_cfg', None)
    cfg.model.backbone.pop('pretrained', None)
    model = MODELS.build(cfg.model)
    if type(model.backbone).__name__ != 'NesT':
        raise ValueError(f'{config}: GradCAT needs an mmhvit.NesT backbone, got '
                         f'{type(model.backbone).__name__}')
    load_checkpoint(model, checkpoint, map_location='cpu')
    model.eval()
    preprocess = cfg.get('data_preprocessor') or cfg.model.get('data_preprocessor') or {}
    resized = Image.open(image).convert('RGB').resize(size[::-1], Image.BICUBIC)
    mean = torch.tensor(preprocess.get('mean', IMAGENET_MEAN)).view(1, 3, 1, 1)
    std = torch.tensor(preprocess.get('std', IMAGENET_STD)).view(1, 3, 1, 1)
    pixels = torch.from_numpy(np.asarray(resized, dtype=np.float32)).permute(2, 0, 1)[None]
    inputs = (pixels - mean) / std  # RGB, as the data preprocessor's to_rgb produces
    result = nest_gradcat(model.backbone, lambda x: model(x, mode='tensor'), inputs,
                          target_class)
    return result, resized


def draw_gradcat(image, path: Sequence[Dict], out_file: str, line_width: Optional[int] = None,
                 colors: Sequence[Tuple[int, int, int]] = LEVEL_COLORS):
    """Draw the chosen blocks (one box per level, top level first) over a PIL image; save a PNG."""
    from PIL import ImageDraw

    canvas = image.convert('RGB')
    draw = ImageDraw.Draw(canvas)
    width = line_width or max(1, min(canvas.size) // 100)
    for step, node in enumerate(path):
        x0, y0, x1, y1 = node['box']
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), outline=colors[step % len(colors)],
                       width=width + len(path) - 1 - step)
    canvas.save(out_file, format='PNG')
    return canvas
