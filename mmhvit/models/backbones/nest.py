"""NesT: Nested Hierarchical Transformer as a dense-prediction backbone.

`Nested Hierarchical Transformer: Towards Accurate, Data-Efficient and Interpretable Visual
Understanding <https://arxiv.org/abs/2105.12723>`_ (Zhang et al., AAAI 2022). Official code:
``google-research/nested-transformer`` (JAX); timm's ``nest_*_jx`` models carry its weights.
"""
import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_backbone
from ..converters import convert_nest_checkpoint, describe_nest_checkpoint
from ..converters.nest import OFFICIAL_LEVELS
from ..layers import (
    BackboneStage,
    TransformerLayer,
    build_norm2d,
    fitted_window,
    is_exporting,
    pad_nchw,
    pad_nhwc,
    padding_to_multiple,
    resize_pos_map,
    trunc_normal_init,
    window_key_mask,
    window_partition,
    window_reverse,
)
from .base_backbone import HViTBackbone

POOL_PADDINGS = ('same', 'symmetric')


class NesTPatchEmbed(nn.Module):
    """Non-overlapping ``patch_size`` conv; the image is zero-padded to whole patches first."""

    def __init__(self, in_channels: int, embed_dims: int, patch_size: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, embed_dims, patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad_h, pad_w = padding_to_multiple(x.shape[-2], x.shape[-1], self.patch_size)
        return self.proj(pad_nchw(x, pad_h, pad_w))


class BlockAggregation(nn.Module):
    """conv3x3 -> norm over channels -> max-pool 3x3 stride 2: NCHW (H, W) -> ceil(H/2, W/2).

    ``padding='same'`` reproduces TF "SAME" pooling (for an even side: nothing before, one after),
    which the official weights were trained with; ``'symmetric'`` pads one on each side (timm's
    non-jx models). Both give ceil(n / 2) outputs for any side n, odd or even.
    """

    def __init__(self, in_dims: int, out_dims: int, norm_cfg: dict, padding: str = 'same'):
        super().__init__()
        self.padding = padding
        self.conv = nn.Conv2d(in_dims, out_dims, 3, padding=1)
        self.norm = build_norm2d(norm_cfg, out_dims)

    @staticmethod
    def _same_pad(size: int) -> Tuple[int, int]:
        total = max((math.ceil(size / 2) - 1) * 2 + 3 - size, 0)
        return total // 2, total - total // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.conv(x))
        if self.padding == 'symmetric':
            return F.max_pool2d(x, 3, 2, padding=1)
        if is_exporting():
            # SAME padding is (n % 2 before, 1 after) for every side n: pad one on each side, then
            # drop the first row/col of even sides (sizes are traced values: no branch on them).
            x = F.pad(x, (1, 1, 1, 1), value=torch.finfo(x.dtype).min)
            return F.max_pool2d(x[..., 1 - x.shape[-2] % 2:, 1 - x.shape[-1] % 2:], 3, 2)
        top, bottom = self._same_pad(x.shape[-2])
        left, right = self._same_pad(x.shape[-1])
        x = F.pad(x, (left, right, top, bottom), value=float('-inf'))
        return F.max_pool2d(x, 3, 2)


def blocks_to_map(pos: torch.Tensor, layout: Tuple[int, int, int, int]) -> torch.Tensor:
    """(1, rows * cols, bh * bw, C) blocked embedding -> (1, C, rows * bh, cols * bw) map."""
    rows, cols, bh, bw = layout
    channels = pos.shape[-1]
    pos = pos.reshape(1, rows, cols, bh, bw, channels).permute(0, 5, 1, 3, 2, 4)
    return pos.reshape(1, channels, rows * bh, cols * bw)


def map_to_blocks(pos: torch.Tensor, layout: Tuple[int, int, int, int]) -> torch.Tensor:
    """Inverse of :func:`blocks_to_map`."""
    rows, cols, bh, bw = layout
    channels = pos.shape[1]
    pos = pos.reshape(1, channels, rows, bh, cols, bw).permute(0, 2, 4, 3, 5, 1)
    return pos.reshape(1, rows * cols, bh * bw, channels)


class NesTStage(BackboneStage):
    """One level: (block aggregation), position embedding, transformer layers over blocks.

    Works on the valid (unpadded) NCHW token map. For the layers the map is zero-padded at the
    bottom/right to whole blocks, the blocks become a batch axis (weights shared by all blocks,
    one attention call), and padded tokens are masked out as keys, so valid outputs never depend
    on the padding; the padded rows/cols are dropped again.

    Args:
        blocks (list[TransformerLayer]): The layers.
        block_size (int): Block side in tokens.
        pos_layout (tuple, optional): (rows, cols, bh, bw) of the position embedding at the
            pre-training size; None: no position embedding.
        downsample (nn.Module, optional): Block aggregation from the previous level.
        out_norm (nn.Module, optional): Norm of this stage's output only (the ImageNet model's
            final norm); the next stage takes the map before it.
    """

    def __init__(self, blocks: List[nn.Module], block_size: int,
                 pos_layout: Optional[Tuple[int, int, int, int]],
                 downsample: Optional[nn.Module] = None, out_norm: Optional[nn.Module] = None):
        super().__init__()
        self.block_size = block_size
        self.pos_layout = pos_layout
        self.downsample = downsample
        self.pos_embed = None
        if pos_layout is not None:
            rows, cols, bh, bw = pos_layout
            dims = blocks[0].norm1.normalized_shape[0]
            self.pos_embed = nn.Parameter(torch.zeros(1, rows * cols, bh * bw, dims))
        self.blocks = nn.ModuleList(blocks)
        self.out_norm = out_norm

    def pos_map(self, size: Tuple[int, int]) -> torch.Tensor:
        """The position embedding as one (1, H, W, C) map over the level's real token grid."""
        pos = resize_pos_map(blocks_to_map(self.pos_embed, self.pos_layout), size)
        return pos.permute(0, 2, 3, 1)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """NCHW map -> (the map the next stage takes, this stage's output)."""
        if self.downsample is not None:
            x = self.downsample(x)
        if self.pos_embed is not None or len(self.blocks):
            x = self._attend(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()
        out = x if self.out_norm is None else self.out_norm(x).contiguous()
        return x, out

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        """Position embedding and layers on an NHWC map."""
        height, width = x.shape[1:3]
        if self.pos_embed is not None:
            x = x + self.pos_map((height, width))
        if not len(self.blocks):
            return x
        bh, bw = fitted_window(self.block_size, height, width)
        pad_h, pad_w = padding_to_multiple(height, width, bh, bw)
        key_mask = window_key_mask(height, width, pad_h, pad_w, bh, bw, x.device)
        tokens = window_partition(pad_nhwc(x, pad_h, pad_w), bh, bw)
        for block in self.blocks:
            tokens = self.run_block(block, tokens, key_mask)
        return window_reverse(tokens, bh, bw, height + pad_h, width + pad_w)[:, :height, :width]


@register_backbone(plain_name=True)
class NesT(HViTBackbone):
    """NesT backbone with outputs at strides 4, 8, 16 and 32, for any input size.

    A 4x4 patch embedding, then levels of non-overlapping blocks of ``block_size`` x
    ``block_size`` tokens (14 x 14 on ImageNet: 4x4, 2x2, 1x1 blocks at 224). Each level adds its
    learned position embedding (1, T blocks, N tokens, C) and runs pre-LN transformer layers whose
    weights are shared by all blocks; a block aggregation (conv3x3 -> LN -> max-pool 3x3 s2)
    doubles the channels and halves the grid between levels. At 224 x 224 the first three levels
    are exactly the official model's.

    Other input sizes (H, W >= 1, square or not): the image is padded to whole patches, so level i
    has ceil(H / s) x ceil(W / s) tokens. Each level is cut into blocks anchored at the top-left:
    the official rule (fixed-size blocks, their number grows with the image), which keeps every
    level-(i+1) block the parent of 2 x 2 level-i blocks (a level smaller than a block is one block
    of its own size). Padded tokens are masked out of attention, and the aggregation sees only the
    valid map, so outputs are as if the image had exactly that size. A level's position embedding
    is read as one map over all its blocks, resized (bicubic) to the level's real token grid and
    re-blocked; checkpoints made at another pre-training size are resized on load.

    The ImageNet model has three levels (strides 4, 8, 16); the stride-32 stage is one more block
    aggregation doubling the channels, with ``depths[3]`` transformer layers after it (0 in the zoo
    archs; with a whole-map position embedding when > 0): parameters that no pretrained
    checkpoint covers.

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'base'`` or a dict with ``embed_dims``,
            ``depths``, ``num_heads`` (4 stages each) and optionally ``block_size`` (14),
            ``patch_size`` (4), ``mlp_ratio`` (4), ``qkv_bias`` (True). Default: 'tiny'.
        pretrain_img_size (int | tuple): Image size the position embeddings are laid out for; the
            third level must be whole blocks there (224 for the ImageNet archs).
        final_norm (bool): Apply the pretrained final norm (the one before timm's head) to the
            stride-16 output. Needed for the ImageNet classifier. Default True.
        pool_padding (str): ``'same'`` (TF SAME max-pool, official / ``nest_*_jx`` weights) or
            ``'symmetric'`` (timm's non-jx ``nest_*``).
        **kwargs: The arguments every backbone takes (:class:`HViTBackbone`): ``in_channels``,
            ``out_indices``, ``drop_rate``, ``attn_drop_rate``, ``drop_path_rate``, ``qkv_bias``,
            ``norm_cfg`` (default LN, eps 1e-6), ``act_cfg`` (default GELU), ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``pretrained``, ``init_cfg`` (our, timm's or
            mmpretrain-classifier checkpoints).
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], dict(embed_dims=[96, 192, 384, 768], depths=[2, 2, 8, 0],
                                            num_heads=[3, 6, 12, 24])),
        **dict.fromkeys(['s', 'small'], dict(embed_dims=[96, 192, 384, 768],
                                             depths=[2, 2, 20, 0], num_heads=[3, 6, 12, 24])),
        **dict.fromkeys(['b', 'base'], dict(embed_dims=[128, 256, 512, 1024],
                                            depths=[2, 2, 20, 0], num_heads=[4, 8, 16, 32])),
    }
    essential_keys = ('embed_dims', 'depths', 'num_heads')
    optional_keys = dict(block_size=14, patch_size=4, mlp_ratio=4., qkv_bias=True)
    default_norm_cfg = dict(type='LN', eps=1e-6)
    default_act_cfg = dict(type='GELU')
    pretrained_stages = OFFICIAL_LEVELS  # the ImageNet model's; the last stage is a new stride 32

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 pretrain_img_size: Union[int, Sequence[int]] = 224,
                 final_norm: bool = True,
                 pool_padding: str = 'same',
                 **kwargs):
        if pool_padding not in POOL_PADDINGS:
            raise ValueError(f'NesT: pool_padding must be one of {POOL_PADDINGS}, got '
                             f'{pool_padding!r}')
        if not isinstance(final_norm, bool):
            raise TypeError(f'NesT: final_norm must be a bool, got {final_norm!r}')
        self.pool_padding = pool_padding
        self.final_norm = final_norm
        self.pretrain_img_size = self._check_img_size(pretrain_img_size)
        super().__init__(arch, **kwargs)

    # --- construction -------------------------------------------------------------------------
    def _check_img_size(self, size) -> Tuple[int, int]:
        if isinstance(size, int):
            size = (size, size)
        if not (isinstance(size, Sequence) and len(size) == 2
                and all(isinstance(s, int) and s > 0 for s in size)):
            raise TypeError(f'NesT: pretrain_img_size must be an int or a pair of ints, got '
                            f'{size!r}')
        return tuple(size)

    def canonical_arch_name(self, name: str) -> str:
        return {'t': 'tiny', 's': 'small', 'b': 'base'}.get(name, name)

    def check_arch(self, settings: dict) -> dict:
        settings = super().check_arch(settings)
        for key in self.essential_keys:
            if not isinstance(settings[key], (list, tuple)):
                raise ValueError(f'NesT: arch {key} needs {self.num_stages} values, got '
                                 f'{settings[key]!r}')
            settings[key] = [int(v) for v in settings[key]]
        unit = settings['patch_size'] * settings['block_size'] * 2**(self.pretrained_stages - 1)
        if any(s % unit for s in self.pretrain_img_size):
            raise ValueError(f'NesT: pretrain_img_size must be (a pair of) multiples of {unit} '
                             f'(patch {settings["patch_size"]} x block {settings["block_size"]} '
                             f'x 2^{self.pretrained_stages - 1}), got {self.pretrain_img_size}')
        return settings

    def _pos_layouts(self) -> List[Optional[Tuple[int, int, int, int]]]:
        """(rows, cols, bh, bw) per stage at the pre-training size, where every ImageNet level is
        whole blocks; the stride-32 stage has one whole-map embedding, if it has layers."""
        s = self.arch_settings
        layouts = []
        for i in range(self.pretrained_stages):
            grid = [size // (s['patch_size'] * 2**i) for size in self.pretrain_img_size]
            layouts.append((grid[0] // s['block_size'], grid[1] // s['block_size'],
                            s['block_size'], s['block_size']))
        last = [math.ceil(size / (s['patch_size'] * 2**self.pretrained_stages))
                for size in self.pretrain_img_size]
        layouts.append((1, 1, *last) if s['depths'][-1] > 0 else None)
        return layouts

    def _build_layers(self) -> None:
        s = self.arch_settings
        dims = s['embed_dims']
        self.stage_channels = tuple(dims)
        self.block_size, self.patch_size = s['block_size'], s['patch_size']
        self.patch_embed = NesTPatchEmbed(self.in_channels, dims[0], s['patch_size'])
        rates = self.drop_path_schedule(s['depths'])
        layouts = self._pos_layouts()
        for i in range(self.num_built_stages):
            blocks = [
                TransformerLayer(dims[i], s['num_heads'][i], s['mlp_ratio'], self.qkv_bias,
                                 self.drop_rate, self.attn_drop_rate, rate, self.norm_cfg,
                                 self.act_cfg) for rate in rates[i]
            ]
            downsample = (BlockAggregation(dims[i - 1], dims[i], self.norm_cfg,
                                           self.pool_padding) if i else None)
            final = self.final_norm and i == self.pretrained_stages - 1 and i in self.out_indices
            out_norm = build_norm2d(self.norm_cfg, dims[i]) if final else None
            self.stages.append(
                NesTStage(blocks, s['block_size'], layouts[i], downsample, out_norm))

    def init_default_weights(self) -> None:
        """Official init: trunc-normal(0.02) for dense/conv kernels and embeddings, zero bias."""
        trunc_normal_init(self)
        for stage in self.stages:
            if stage.pos_embed is not None:
                trunc_normal_(stage.pos_embed, std=.02)

    # --- forward: a stage returns (the map the next stage takes, its output) -------------------
    def forward_stem(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.patch_embed(x)
        return x, x

    def forward_stage(self, stage: NesTStage, state: Tuple[torch.Tensor, torch.Tensor]
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
        return stage(state[0])

    def stage_output(self, index: int, state: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return state[1]

    # --- checkpoints --------------------------------------------------------------------------
    def pos_embed_keys(self) -> Tuple[str, ...]:
        return tuple(f'stages.{i}.pos_embed' for i, stage in enumerate(self.stages)
                     if stage.pos_embed is not None)

    def resize_pos_embed(self, key: str, value: torch.Tensor) -> Optional[torch.Tensor]:
        """A square checkpoint grid of square blocks, read as one map and re-blocked."""
        stage = self.stages[int(key.split('.')[1])]
        if value.dim() != 4 or value.shape[-1] != stage.pos_embed.shape[-1]:
            return None
        blocks, tokens = value.shape[1:3]
        rows, side = math.isqrt(blocks), math.isqrt(tokens)
        if rows * rows != blocks or side * side != tokens:
            raise ValueError(f'NesT: cannot resize {key} of shape {tuple(value.shape)}: only '
                             f'square grids of square blocks can be read back as a map')
        pos_map = blocks_to_map(value.float(), (rows, rows, side, side))
        rows_new, cols_new, bh, bw = stage.pos_layout
        pos_map = resize_pos_map(pos_map, (rows_new * bh, cols_new * bw))
        return map_to_blocks(pos_map, stage.pos_layout).to(value.dtype)

    def convert_checkpoint(self, state_dict: dict) -> dict:
        return convert_nest_checkpoint(state_dict, num_heads=self.arch_settings['num_heads'])

    def describe_checkpoint(self, state_dict: dict) -> str:
        return describe_nest_checkpoint(state_dict, type(self))

