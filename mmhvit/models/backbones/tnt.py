"""TNT (Transformer iN Transformer) as a dense-prediction backbone.

`Transformer in Transformer <https://arxiv.org/abs/2103.00112>`_ (Han et al., NeurIPS 2021).
The layers follow the official code (``huawei-noah/Efficient-AI-Backbones``,
``tnt_pytorch/tnt.py``); official, timm and mmpretrain checkpoints are converted by
:func:`~mmhvit.models.converters.convert_tnt_checkpoint`.
"""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_backbone
from ..converters import convert_tnt_checkpoint, describe_tnt_checkpoint
from ..layers import (
    PATCH_SIZE,
    WORD_SIZE,
    TNTBlock,
    TNTEmbed,
    TNTStage,
    WordMap,
    build_norm2d,
    build_rescale,
    ceil_div,
    is_exporting,
    pad_nchw,
    padding_to_multiple,
    resize_pos_map,
    trunc_normal_init,
)
from .base_backbone import HViTBackbone, image_size_pair

# Output i rescales the sentence map to stride OUT_STRIDES[i].
OUT_STRIDES = (4, 8, 16, 32)
OUT_TYPES = ('pyramid', 'raw', 'cls_token')


@register_backbone(plain_name=False)
class TNT(HViTBackbone):
    """TNT backbone: `Transformer in Transformer <https://arxiv.org/abs/2103.00112>`_.

    Every 16 x 16 patch is a *sentence* of 4 x 4 *words*. Each block runs an inner transformer over
    the words of each sentence, adds a projection of the words to their sentence, then an outer
    transformer over the sentences and a class token: the official model (timm's default layout),
    whose class token gives the official logits at 224 x 224. Dense outputs follow the paper's
    detection recipe: stage i is the ``depths[i]`` blocks after stage i - 1, and its stride-16
    sentence map is normalised (``pyramid_norm_cfg``) and rescaled to stride 4, 8, 16, 32 by a
    ViTDet simple pyramid. Any input of at least 1 x 1 works: it is zero-padded to whole patches,
    the position embedding is resized (bicubic) to the real sentence grid, and padded sentences
    are masked out of the outer attention and of the SE mean.

    Args:
        arch (str | dict): ``'tiny'`` (``'ti'``), ``'small'`` (``'s'``), ``'base'`` (``'b'``) or a
            dict with ``embed_dims``, ``inner_dims``, ``depths`` (4 block counts; a 0 repeats the
            previous map), ``num_heads``, ``inner_num_heads`` and optionally ``mlp_ratio`` (4),
            ``se`` (False), ``qkv_bias`` (False), ``patch_size`` (16) and ``word_size`` (4), both
            powers of two, and ``conv_stem`` (False; True: words from a convolutional stem over the
            whole image, :class:`TNTEmbed`, for training from scratch). Default: 'small'.
        pretrain_img_size (int | tuple): Image size of the stored position embedding. Default 224.
        out_type (str): ``'pyramid'`` (NCHW maps at strides 4-32), ``'raw'`` (the stride-16
            sentence maps) or ``'cls_token'`` (the class token after each stage). Default: pyramid.
        final_norm (bool): The official final norm after the last block. Default: True.
        size_divisor (int, optional): Pad inputs to a multiple of this (of the patch size).
        legacy (bool): The layout of timm ``legacy=True`` and mmpretrain. Default: False.
        pyramid_norm_cfg (dict): Norm of each pyramid output. Default: LN over channels.
        window_size (int, optional): ViTDet's windowed outer attention (`Li et al. 2022
            <https://arxiv.org/abs/2203.16527>`_) with windows of this many sentences a side, in
            the blocks not in ``global_blocks``; same parameters, the class token global in every
            block. Default: None, global attention everywhere (the official model).
        global_blocks (Sequence[int], optional): Blocks (0-based, negative from the end) that stay
            global with ``window_size``. Default: the last block of every stage.
        word_maps (bool): Add each stage's words, laid out in place, pooled, projected and
            normalised (:class:`WordMap`), to the outputs finer than the sentences. Default: False.
        **kwargs: The arguments every backbone takes (:class:`HViTBackbone`), ``init_cfg``
            included (official, timm and mmpretrain checkpoints are converted on load).
    """

    arch_zoo = {
        'tiny': dict(embed_dims=192, inner_dims=12, depths=[3, 3, 3, 3], num_heads=3,
                     inner_num_heads=2),
        'small': dict(embed_dims=384, inner_dims=24, depths=[3, 3, 3, 3], num_heads=6,
                      inner_num_heads=4),
        'base': dict(embed_dims=640, inner_dims=40, depths=[3, 3, 3, 3], num_heads=10,
                     inner_num_heads=4),
    }
    arch_aliases = {'ti': 'tiny', 's': 'small', 'b': 'base'}
    essential_keys = ('embed_dims', 'inner_dims', 'depths', 'num_heads', 'inner_num_heads')
    optional_keys = dict(mlp_ratio=4., se=False, qkv_bias=False, patch_size=PATCH_SIZE,
                         word_size=WORD_SIZE, conv_stem=False)
    default_norm_cfg = dict(type='LN')
    default_act_cfg = dict(type='GELU')

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 out_type: str = 'pyramid',
                 final_norm: bool = True,
                 size_divisor: Optional[int] = None,
                 legacy: bool = False,
                 pyramid_norm_cfg: dict = dict(type='LN2d', eps=1e-6),
                 window_size: Optional[int] = None,
                 global_blocks: Optional[Sequence[int]] = None,
                 word_maps: bool = False,
                 **kwargs):
        _check_windows(window_size, global_blocks)
        # Resolved against the arch's depths (_resolve_global_blocks) when the blocks are built.
        self.window_size, self._requested_global_blocks = window_size, global_blocks
        if out_type not in OUT_TYPES:
            raise ValueError(f'TNT: out_type must be one of {OUT_TYPES}, got {out_type!r}')
        for name, value in (('final_norm', final_norm), ('legacy', legacy),
                            ('word_maps', word_maps)):
            if not isinstance(value, bool):
                raise TypeError(f'TNT: {name} must be a bool, got {value!r}')
        self.pretrain_img_size = image_size_pair('TNT', pretrain_img_size)
        self.out_type, self.final_norm, self.size_divisor = out_type, final_norm, size_divisor
        self.legacy, self.pyramid_norm_cfg = legacy, pyramid_norm_cfg
        self.word_maps = word_maps
        super().__init__(arch, **kwargs)
        if legacy:
            self.arch_name += ' (legacy)'

    # --- construction -------------------------------------------------------------------------
    def check_arch(self, settings: dict) -> dict:
        settings = super().check_arch(settings)
        depths = settings['depths']
        if not isinstance(depths, (list, tuple)) or any(int(d) < 0 for d in depths) \
                or sum(depths) < 1:
            raise ValueError(f'TNT: arch depths must be {self.num_stages} block counts (>= 0, '
                             f'at least one block), got {depths}')
        settings['depths'] = [int(d) for d in depths]
        if not isinstance(settings['conv_stem'], bool):
            raise TypeError(f"TNT: arch conv_stem must be a bool, got {settings['conv_stem']!r}")
        for dims, heads in (('embed_dims', 'num_heads'), ('inner_dims', 'inner_num_heads')):
            if settings[dims] % settings[heads]:
                raise ValueError(f'TNT: {dims}={settings[dims]} is not divisible by '
                                 f'{heads}={settings[heads]}')
        patch, word = settings['patch_size'], settings['word_size']
        # The pyramid rescales the sentence map by powers of two.
        if not (_is_power_of_two(patch) and _is_power_of_two(word) and word <= patch):
            raise ValueError(f'TNT: arch patch_size and word_size must be powers of two with '
                             f'word_size <= patch_size, got patch_size={patch}, word_size={word}')
        return settings

    def _check_sizes(self) -> None:
        """Sizes that depend on the arch's patch size."""
        patch = self.arch_settings['patch_size']
        if self.size_divisor is None:
            self.size_divisor = patch
        if not (isinstance(self.size_divisor, int) and self.size_divisor > 0
                and self.size_divisor % patch == 0):
            raise ValueError(f'TNT: size_divisor must be a positive multiple of the patch size '
                             f'{patch}, got {self.size_divisor}')
        self.pos_grid = tuple(s // patch for s in self.pretrain_img_size)
        if len(self.pos_grid) != 2 or min(self.pos_grid) < 1:
            raise ValueError(f'TNT: pretrain_img_size must be at least the patch size {patch}, '
                             f'got {self.pretrain_img_size}')

    def _build_layers(self) -> None:
        s = self.arch_settings
        self._check_sizes()
        self.global_blocks = _resolve_global_blocks(self.window_size,
                                                    self._requested_global_blocks, s['depths'])
        self.stage_channels = (s['embed_dims'], ) * self.num_stages
        self.patch_embed = TNTEmbed(self.in_channels, s['inner_dims'], s['embed_dims'],
                                    pos_grid=self.pos_grid, norm_cfg=self.norm_cfg,
                                    drop_rate=self.drop_rate, legacy=self.legacy,
                                    patch_size=s['patch_size'], word_size=s['word_size'],
                                    conv_stem=s['conv_stem'])
        num_words = (s['patch_size'] // s['word_size'])**2
        last_stage = max(i for i, depth in enumerate(s['depths']) if depth)
        for i, rates in enumerate(self.drop_path_schedule(s['depths'])[:self.num_built_stages]):
            first = sum(s['depths'][:i])
            blocks = [
                TNTBlock(s['inner_dims'], s['embed_dims'], inner_num_heads=s['inner_num_heads'],
                         num_heads=s['num_heads'], se=s['se'], legacy=self.legacy,
                         num_words=num_words,
                         window_size=(None if first + j in self.global_blocks else
                                      self.window_size), mlp_ratio=s['mlp_ratio'],
                         qkv_bias=self.qkv_bias, drop_rate=self.drop_rate,
                         attn_drop_rate=self.attn_drop_rate, drop_path_rate=rate,
                         norm_cfg=self.norm_cfg, act_cfg=self.act_cfg)
                for j, rate in enumerate(rates)
            ]
            # Outputs that are not requested get nothing: no parameter without gradient.
            out_norm = out_proj = word_map = None
            if self.out_type == 'pyramid' and i in self.out_indices:
                out_norm = build_norm2d(self.pyramid_norm_cfg, s['embed_dims'])
                out_proj = build_rescale(s['patch_size'] / OUT_STRIDES[i], s['embed_dims'],
                                         self.pyramid_norm_cfg)
                if self.word_maps and s['word_size'] <= OUT_STRIDES[i] < s['patch_size']:
                    word_map = WordMap(s['inner_dims'], s['embed_dims'],
                                       words_per_side=s['patch_size'] // s['word_size'],
                                       pool=OUT_STRIDES[i] // s['word_size'],
                                       norm_cfg=self.pyramid_norm_cfg)
            norm = (build_norm_layer(self.norm_cfg, s['embed_dims'])[1]
                    if self.final_norm and i == last_stage else None)
            self.stages.append(TNTStage(blocks, out_norm=out_norm, out_proj=out_proj, norm=norm,
                                        word_map=word_map))

    def init_default_weights(self) -> None:
        """The official initialisation: truncated normal (std .02) for tokens and linears."""
        embed = self.patch_embed
        for param in (embed.cls_token, embed.pos_embed, embed.word_pos_embed):
            trunc_normal_(param, std=.02)
        trunc_normal_init(self, layer_types=(nn.Linear, ))  # the official code leaves convs be

    # --- forward ------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input(x)
        size = tuple(x.shape[-2:])
        x = pad_nchw(x, *padding_to_multiple(*size, self.size_divisor))
        patch = self.arch_settings['patch_size']
        real = (ceil_div(size[0], patch), ceil_div(size[1], patch))
        padded = (x.shape[2] // patch, x.shape[3] // patch)
        key_mask = self.sentence_key_mask(real, padded, x.device)
        words, sentences = self.patch_embed(x, real)
        outs = []
        for index, stage in enumerate(self.stages):
            words, sentences = stage(words, sentences, key_mask, (real, padded))
            if index in self.out_indices:
                outs.append(self.output(index, words, sentences, real, padded, size))
        return self.nchw_outputs(outs)

    @staticmethod
    def sentence_key_mask(real: Tuple[int, int], padded: Tuple[int, int],
                          device: torch.device) -> Optional[torch.Tensor]:
        """(1, 1 + padded sentences), True for the class token and the real sentences; None when
        no sentence is wholly padding (attention then runs unmasked)."""
        if not is_exporting() and real == padded:
            return None
        rows = torch.arange(padded[0], device=device) < real[0]
        cols = torch.arange(padded[1], device=device) < real[1]
        valid = rows[:, None] & cols[None, :]
        return torch.cat([valid.new_ones(1), valid.flatten()])[None]

    def output(self, index: int, words: torch.Tensor, sentences: torch.Tensor,
               real: Tuple[int, int], padded: Tuple[int, int],
               size: Tuple[int, int]) -> torch.Tensor:
        """Output ``index`` from the words and sentences after its stage (``out_type``)."""
        if self.out_type == 'cls_token':
            return sentences[:, 0]
        batch, _, channels = sentences.shape
        fmap = sentences[:, 1:].reshape(batch, *padded, channels)[:, :real[0], :real[1]]
        fmap = fmap.permute(0, 3, 1, 2).contiguous()
        stage = self.stages[index]
        if stage.out_proj is None:
            return fmap
        stride = OUT_STRIDES[index]
        fmap = stage.out_proj(stage.out_norm(fmap))
        if stage.word_map is not None:
            fine = stage.word_map(words, batch, padded)
            fmap = fmap + fine[..., :fmap.shape[-2], :fmap.shape[-1]]
        # Upsampled maps of a partial last patch reach into the padding: crop them.
        return fmap[..., :ceil_div(size[0], stride), :ceil_div(size[1], stride)]

    # --- checkpoints --------------------------------------------------------------------------
    def pos_embed_keys(self) -> Tuple[str, ...]:
        return ('patch_embed.pos_embed', )

    def resize_pos_embed(self, key: str, value: torch.Tensor) -> Optional[torch.Tensor]:
        """A square checkpoint grid of sentence positions, interpolated to this model's grid."""
        if value.dim() != 3 or value.shape[-1] != self.arch_settings['embed_dims']:
            return None
        tokens = value.shape[1] - 1
        side = math.isqrt(tokens)
        if side * side != tokens:
            raise ValueError(f'TNT: cannot resize {key} of shape {tuple(value.shape)}: its '
                             f'{tokens} patch positions do not form a square grid')
        grid = value[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
        grid = resize_pos_map(grid.float(), self.pos_grid).to(value.dtype)
        return torch.cat([value[:, :1], grid.flatten(2).transpose(1, 2)], dim=1)

    def convert_checkpoint(self, state_dict: dict) -> dict:
        return convert_tnt_checkpoint(state_dict, depths=self.arch_settings['depths'])

    def describe_checkpoint(self, state_dict: dict) -> str:
        return describe_tnt_checkpoint(state_dict, type(self))


def _check_windows(window_size, global_blocks) -> None:
    """Types of the window arguments (:func:`_resolve_global_blocks` checks their range)."""
    if window_size is not None and (isinstance(window_size, bool)
                                    or not isinstance(window_size, int) or window_size < 1):
        raise ValueError(f'TNT: window_size must be a positive int or None, got {window_size!r}')
    if global_blocks is None:
        return
    if window_size is None:
        raise ValueError('TNT: global_blocks needs window_size (without windows every block is '
                         'global)')
    if not isinstance(global_blocks, Sequence) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in global_blocks):
        raise TypeError(f'TNT: global_blocks must be a sequence of block indices, got '
                        f'{global_blocks!r}')


def _resolve_global_blocks(window_size: Optional[int], global_blocks: Optional[Sequence[int]],
                           depths: Sequence[int]) -> Tuple[int, ...]:
    """The blocks with global outer attention, sorted and non-negative (0-based over all
    ``sum(depths)`` blocks), from TNT's checked (:func:`_check_windows`) window arguments.

    Without ``window_size`` every block is global; ``global_blocks=None`` means the last block of
    every stage that has blocks (ViTDet keeps 4 evenly spaced global blocks of 12); negative
    indices count from the end.

    Raises:
        ValueError: ``global_blocks`` names a block twice or one that does not exist.
    """
    total = sum(depths)
    if window_size is None:
        return tuple(range(total))
    if global_blocks is None:
        return tuple(sum(depths[:i + 1]) - 1 for i, depth in enumerate(depths) if depth)
    indices = [i + total if i < 0 else i for i in global_blocks]
    if any(not 0 <= i < total for i in indices) or len(set(indices)) != len(indices):
        raise ValueError(f'TNT: global_blocks {tuple(global_blocks)} must name distinct blocks in '
                         f'0..{total - 1}')
    return tuple(sorted(indices))


def _is_power_of_two(value) -> bool:
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0
