"""NesT: Nested Hierarchical Transformer as a dense-prediction backbone.

`Nested Hierarchical Transformer: Towards Accurate, Data-Efficient and Interpretable Visual
Understanding <https://arxiv.org/abs/2105.12723>`_ (Zhang et al., AAAI 2022). Official code:
``google-research/nested-transformer`` (JAX); timm's ``nest_*_jx`` models carry its weights.
"""
import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_backbone
from ..converters import convert_nest_checkpoint, describe_nest_checkpoint
from ..converters.nest import OFFICIAL_LEVELS
from ..layers import (
    BlockAggregation,
    NesTPatchEmbed,
    NesTStage,
    TransformerLayer,
    blocks_to_map,
    build_norm2d,
    map_to_blocks,
    resize_pos_map,
    trunc_normal_init,
)
from .base_backbone import HViTBackbone, image_size_pair

POOL_PADDINGS = ('same', 'symmetric')


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
        'tiny': dict(embed_dims=[96, 192, 384, 768], depths=[2, 2, 8, 0],
                     num_heads=[3, 6, 12, 24]),
        'small': dict(embed_dims=[96, 192, 384, 768], depths=[2, 2, 20, 0],
                      num_heads=[3, 6, 12, 24]),
        'base': dict(embed_dims=[128, 256, 512, 1024], depths=[2, 2, 20, 0],
                     num_heads=[4, 8, 16, 32]),
    }
    arch_aliases = {'t': 'tiny', 's': 'small', 'b': 'base'}
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
        self.pretrain_img_size = image_size_pair('NesT', pretrain_img_size)
        super().__init__(arch, **kwargs)

    # --- construction -------------------------------------------------------------------------
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
                TransformerLayer(dims[i], s['num_heads'][i], mlp_ratio=s['mlp_ratio'],
                                 qkv_bias=self.qkv_bias, drop_rate=self.drop_rate,
                                 attn_drop_rate=self.attn_drop_rate, drop_path_rate=rate,
                                 norm_cfg=self.norm_cfg, act_cfg=self.act_cfg)
                for rate in rates[i]
            ]
            downsample = (BlockAggregation(dims[i - 1], dims[i], norm_cfg=self.norm_cfg,
                                           padding=self.pool_padding) if i else None)
            final = self.final_norm and i == self.pretrained_stages - 1 and i in self.out_indices
            out_norm = build_norm2d(self.norm_cfg, dims[i]) if final else None
            self.stages.append(
                NesTStage(blocks, s['block_size'], pos_layout=layouts[i], downsample=downsample,
                          out_norm=out_norm))

    def init_default_weights(self) -> None:
        """Official init: trunc-normal(0.02) for dense/conv kernels and embeddings, zero bias."""
        trunc_normal_init(self)
        for stage in self.stages:
            if stage.pos_embed is not None:
                trunc_normal_(stage.pos_embed, std=.02)

    # --- forward ------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input(x)
        x = self.patch_embed(x)
        outs = []
        for index, stage in enumerate(self.stages):
            x = stage(x)
            if index in self.out_indices:
                # The final norm feeds the output only; the next level takes the map before it.
                outs.append(x if stage.out_norm is None else stage.out_norm(x))
        return self.nchw_outputs(outs)

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

