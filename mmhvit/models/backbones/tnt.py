"""TNT (Transformer iN Transformer) as a dense-prediction backbone.

`Transformer in Transformer <https://arxiv.org/abs/2103.00112>`_ (Han et al., NeurIPS 2021).
The layers follow the official code (``huawei-noah/Efficient-AI-Backbones``,
``tnt_pytorch/tnt.py``); official, timm and mmpretrain checkpoints are converted by
:func:`~mmhvit.models.converters.convert_tnt_checkpoint`.
"""
import math
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_backbone
from ..converters import convert_tnt_checkpoint, describe_tnt_checkpoint
from ..layers import (
    PATCH_SIZE,
    WORD_SIZE,
    BackboneStage,
    TNTBlock,
    TNTEmbed,
    TokenGrids,
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
from .base_backbone import HViTBackbone

# Output i rescales the sentence map to stride OUT_STRIDES[i].
OUT_STRIDES = (4, 8, 16, 32)
OUT_TYPES = ('pyramid', 'raw', 'cls_token')


class TNTState(NamedTuple):
    """What TNT's stages pass on: words (B * N, 16, c) and sentences (B, 1 + N, d), with the
    sentence key mask (None when no sentence is wholly padding) and the geometry the outputs are
    read with: the real and padded sentence grids and the input size."""
    words: torch.Tensor
    sentences: torch.Tensor
    key_mask: Optional[torch.Tensor]
    real: Tuple[int, int]
    padded: Tuple[int, int]
    size: Tuple[int, int]


class TNTStage(BackboneStage):
    """The blocks that feed one output (as Swin's ``SwinBlockSequence``), the output's norm and
    rescaling of the stride-16 sentence map to the output's stride (as mmdet's Swin normalises
    each output), and, in the stage of the last block, the final norm of the ImageNet model."""

    def __init__(self, blocks: List[nn.Module], out_norm: Optional[nn.Module] = None,
                 out_proj: Optional[nn.Module] = None, norm: Optional[nn.Module] = None,
                 word_map: Optional[nn.Module] = None):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.out_norm = out_norm
        self.out_proj = out_proj
        self.word_map = word_map
        self.norm = norm

    def forward(self, words: torch.Tensor, sentences: torch.Tensor,
                key_mask: Optional[torch.Tensor] = None, grid: Optional[TokenGrids] = None):
        for block in self.blocks:
            words, sentences = self.run_block(block, words, sentences, key_mask, grid)
        if self.norm is not None:
            sentences = self.norm(sentences)
        return words, sentences


@register_backbone(plain_name=False)
class TNT(HViTBackbone):
    """TNT backbone: `Transformer in Transformer <https://arxiv.org/abs/2103.00112>`_.

    Every 16 x 16 patch is a *sentence* of 4 x 4 *words*. Each block runs an inner transformer over
    the words of each sentence (all sentences of all images in one batch), adds a projection of the
    words to their sentence, then runs an outer transformer over the sentences and a class token.
    The model is the official one (timm's default layout): at 224 x 224 its class token gives the
    official logits.

    Dense outputs follow the paper's detection recipe: stage i is the ``depths[i]`` blocks after
    stage i - 1 (3 each: blocks 3, 6, 9, 12 end the stages), and its stride-16 sentence map is
    normalised (``pyramid_norm_cfg``, one norm per output as in mmdet's Swin) and rescaled to
    stride 4, 8, 16, 32 by a ViTDet simple pyramid (transposed convs up, identity, max-pool
    down). The stride-4 map is made from the sentences too: ``word_maps=True`` adds the word
    tokens (which do form a stride-4 grid) to the outputs finer than the sentences, and measured
    no better on the bundled data (docs/quickstart_results.md: Mask R-CNN segm mAP 0.292 against
    0.300), so the default is the paper's pyramid of sentences. What did help there, training
    from scratch, is the arch key ``conv_stem``: words from a convolutional stem over the whole
    image rather than a 7x7 conv on each patch alone (segm mAP 0.452 -> 0.804 at 16 epochs).

    Any input of at least 1 x 1 works: it is zero-padded to whole patches (``size_divisor``), the
    sentence position embedding is interpolated (bicubic) to the real sentence grid, sentences
    lying wholly in the padding are masked out of the outer attention (and of the SE mean), and
    output i has ``ceil(H / s_i) x ceil(W / s_i)`` pixels.

    ``window_size`` makes the outer attention ViTDet's (`Li et al. 2022
    <https://arxiv.org/abs/2203.16527>`_): all blocks but ``global_blocks`` attend within
    non-overlapping windows of the sentence grid, with the same parameters (state dicts load both
    ways, ``strict=True``), and a windowed block's attention costs time linear in the sentences
    (an 800 x 1344 image has 4,200). Memory barely changes: the fused SDPA kernels keep global
    attention linear in memory already. The class token stays global in every block: it queries
    all sentences, and every window holds it as one more key (one query and one key per window,
    the cheapest form that still updates it in each block and keeps it in every sentence's
    context); when one window covers the grid, the block equals the global one. The inner (word)
    attention and the SE's mean are unchanged.

    Archs (12 blocks; params with a 1000-class head, equal to timm's; ImageNet-1k top-1 at 224 from
    the paper; TNT-Ti has no released weights; TNT-S+SE, 24.67M and 81.7, is
    ``dict(**TNT.arch_zoo['small'], se=True)``):

    ======  ===========  ==========  ===============  =========  ========  =====
    arch    inner_dims   embed_dims  inner_num_heads  num_heads  params    top-1
    ======  ===========  ==========  ===============  =========  ========  =====
    tiny    12           192         2                3          6.08M     73.9
    small   24           384         4                6          23.77M    81.5
    base    40           640         4                10         65.43M    82.9
    ======  ===========  ==========  ===============  =========  ========  =====

    Args:
        arch (str | dict): A name of ``arch_zoo`` (``tiny``/``ti``, ``small``/``s``,
            ``base``/``b``) or a dict with ``embed_dims`` (d), ``inner_dims`` (c), ``depths``
            (blocks per stage, 4 values; a 0 repeats the previous map, e.g. [12, 0, 0, 0] is
            ViTDet's pyramid from the last map), ``num_heads``, ``inner_num_heads`` and optionally
            ``mlp_ratio`` (4), ``se`` (False), ``qkv_bias`` (False), ``patch_size`` (16, pixels
            per sentence side) and ``word_size`` (4, pixels per word side; both powers of two,
            the official archs use the defaults) and ``conv_stem`` (False: the official 7x7 word
            embedding; True: a convolutional stem, see :class:`TNTEmbed`; new weights, for
            training from scratch). Default: 'small'.
        pretrain_img_size (int | tuple): Image size the sentence position embedding is stored for
            (its grid is this size // the patch size). Default: 224.
        out_type (str): ``'pyramid'``: NCHW maps at strides 4, 8, 16, 32; ``'raw'``: the stride-16
            sentence maps (d channels) themselves; ``'cls_token'``: the class token (B, d) after
            each stage (for image classification, ``out_indices=(3, )`` gives the official
            features). Default: 'pyramid'.
        final_norm (bool): Apply the final norm to the sentences after the last block (official
            classifier). Default: True.
        size_divisor (int, optional): Pad inputs to a multiple of this (a multiple of the patch
            size). Larger values bucket input shapes without changing the valid outputs.
            Default: None, the patch size.
        legacy (bool): Build the older layout of timm ``legacy=True`` and mmpretrain's TNT (its
            weights differ). Default: False.
        pyramid_norm_cfg (dict): Norm of each pyramid output and inside its stride-4 branch.
            Default: LN over channels, eps 1e-6.
        window_size (int, optional): Window side, in sentences, of the windowed outer attention
            of the blocks not in ``global_blocks`` (windows tile the real sentence grid from the
            top left; partial windows are padded and the padding masked). Default: None, global
            attention in every block (the official model, whose logits it keeps).
        global_blocks (Sequence[int], optional): Blocks (0-based over all ``sum(depths)``
            blocks, negative from the end) that keep global attention when ``window_size`` is
            set. Default: None, the last block of every stage that has blocks: blocks 2, 5, 8 and
            11 of the zoo archs, ViTDet's 4 evenly spaced global blocks of 12.
        word_maps (bool): Add to each pyramid output finer than the sentences (strides
            ``word_size <= s < patch_size``) its stage's words laid out in place, average-pooled
            to the output's stride, 1x1-projected to d channels and normalised (``WordMap``).
            New parameters, as the rescaling's: official weights load unchanged. Default: False.
        **kwargs: The arguments every backbone takes (:class:`HViTBackbone`): ``in_channels``,
            ``out_indices``, ``drop_rate``, ``attn_drop_rate``, ``drop_path_rate``, ``qkv_bias``,
            ``norm_cfg`` (default LN), ``act_cfg`` (default GELU), ``frozen_stages`` (0 the
            embeddings, k the stages 1..k), ``norm_eval``, ``with_cp``, ``pretrained``,
            ``init_cfg`` (official, timm and mmpretrain checkpoints are converted on load).
    """

    arch_zoo = {
        **dict.fromkeys(['ti', 'tiny'], dict(embed_dims=192, inner_dims=12, depths=[3, 3, 3, 3],
                                             num_heads=3, inner_num_heads=2)),
        **dict.fromkeys(['s', 'small'], dict(embed_dims=384, inner_dims=24, depths=[3, 3, 3, 3],
                                             num_heads=6, inner_num_heads=4)),
        **dict.fromkeys(['b', 'base'], dict(embed_dims=640, inner_dims=40, depths=[3, 3, 3, 3],
                                            num_heads=10, inner_num_heads=4)),
    }
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
        if isinstance(pretrain_img_size, int):
            pretrain_img_size = (pretrain_img_size, pretrain_img_size)
        self.pretrain_img_size = tuple(pretrain_img_size)
        self.out_type, self.final_norm, self.size_divisor = out_type, final_norm, size_divisor
        self.legacy, self.pyramid_norm_cfg = legacy, pyramid_norm_cfg
        self.word_maps = word_maps
        super().__init__(arch, **kwargs)
        if legacy:
            self.arch_name += ' (legacy)'

    # --- construction -------------------------------------------------------------------------
    def canonical_arch_name(self, name: str) -> str:
        return {'ti': 'tiny', 's': 'small', 'b': 'base'}.get(name, name)

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
                                    self.pos_grid, self.norm_cfg, self.drop_rate, self.legacy,
                                    s['patch_size'], s['word_size'], s['conv_stem'])
        num_words = (s['patch_size'] // s['word_size'])**2
        last_stage = max(i for i, depth in enumerate(s['depths']) if depth)
        for i, rates in enumerate(self.drop_path_schedule(s['depths'])[:self.num_built_stages]):
            first = sum(s['depths'][:i])
            blocks = [
                TNTBlock(s['inner_dims'], s['embed_dims'], s['inner_num_heads'], s['num_heads'],
                         se=s['se'], legacy=self.legacy, num_words=num_words,
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
                                       s['patch_size'] // s['word_size'],
                                       OUT_STRIDES[i] // s['word_size'], self.pyramid_norm_cfg)
            norm = (build_norm_layer(self.norm_cfg, s['embed_dims'])[1]
                    if self.final_norm and i == last_stage else None)
            self.stages.append(TNTStage(blocks, out_norm, out_proj, norm, word_map))

    def init_default_weights(self) -> None:
        """The official initialisation: truncated normal (std .02) for tokens and linears."""
        embed = self.patch_embed
        for param in (embed.cls_token, embed.pos_embed, embed.word_pos_embed):
            trunc_normal_(param, std=.02)
        trunc_normal_init(self, layer_types=(nn.Linear, ))  # the official code leaves convs be

    # --- forward ------------------------------------------------------------------------------
    def forward_stem(self, x: torch.Tensor) -> TNTState:
        height, width = x.shape[-2:]
        x = pad_nchw(x, *padding_to_multiple(height, width, self.size_divisor))
        patch = self.arch_settings['patch_size']
        real = (ceil_div(height, patch), ceil_div(width, patch))
        padded = (x.shape[2] // patch, x.shape[3] // patch)
        key_mask = None  # None keeps attention unmasked when no sentence is wholly padding
        if is_exporting() or real != padded:
            rows = torch.arange(padded[0], device=x.device) < real[0]
            cols = torch.arange(padded[1], device=x.device) < real[1]
            valid = rows[:, None] & cols[None, :]
            # The class token is always a real key.
            key_mask = torch.cat([valid.new_ones(1), valid.flatten()])[None]
        words, sentences = self.patch_embed(x, real)
        return TNTState(words, sentences, key_mask, real, padded, (height, width))

    def forward_stage(self, stage: TNTStage, state: TNTState) -> TNTState:
        words, sentences = stage(state.words, state.sentences, state.key_mask,
                                 (state.real, state.padded))
        return state._replace(words=words, sentences=sentences)

    def stage_output(self, index: int, state: TNTState) -> torch.Tensor:
        return self._output(index, state.sentences, state.words, state.real, state.padded,
                            state.size)

    def _output(self, index: int, sentences: torch.Tensor, words: torch.Tensor,
                real: Tuple[int, int], padded: Tuple[int, int],
                size: Tuple[int, int]) -> torch.Tensor:
        if self.out_type == 'cls_token':
            return sentences[:, 0]
        batch, _, channels = sentences.shape
        fmap = sentences[:, 1:].reshape(batch, *padded, channels)[:, :real[0], :real[1]]
        fmap = fmap.permute(0, 3, 1, 2).contiguous()
        stage = self.stages[index]
        if stage.out_proj is None:
            return fmap
        stride = OUT_STRIDES[index]
        # Upsampled maps of a partial last patch reach into the padding: crop them.
        fmap = stage.out_proj(stage.out_norm(fmap))
        if stage.word_map is not None:
            fine = stage.word_map(words, batch, padded)
            fmap = fmap + fine[..., :fmap.shape[-2], :fmap.shape[-1]]
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
