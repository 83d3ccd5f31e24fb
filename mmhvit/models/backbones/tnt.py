"""TNT (Transformer iN Transformer) as a dense-prediction backbone.

`Transformer in Transformer <https://arxiv.org/abs/2103.00112>`_ (Han et al., NeurIPS 2021).
The layers and parameter names follow the official code (``huawei-noah/Efficient-AI-Backbones``,
``tnt_pytorch/tnt.py``), so official checkpoints load without renaming; timm and mmpretrain
layouts are converted by :func:`convert_tnt_checkpoint`.
"""
import math
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmcv.cnn.bricks import DropPath
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_backbone
from ..layers import Mlp, SimplePyramid, multihead_attention, resize_pos_map
from ..layers.windows import pad_nchw, padding_to_multiple
from .base_backbone import HViTBackbone

PATCH_SIZE = 16  # pixels per sentence side
WORD_STRIDE = 4  # pixels per word side: a sentence holds 4 x 4 words
WORDS_PER_SIDE = PATCH_SIZE // WORD_STRIDE
NUM_WORDS = WORDS_PER_SIDE**2
# The pyramid of output i rescales the stride-16 sentence map to stride OUT_STRIDES[i].
OUT_STRIDES = (4, 8, 16, 32)
OUT_TYPES = ('pyramid', 'raw', 'cls_token')


class TNTAttention(nn.Module):
    """Multi-head self-attention with separate ``qk`` and ``v`` projections (the official layout).

    Args:
        dim (int): Token channels.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias in the ``qk`` and ``v`` projections (official: False).
        attn_drop (float): Dropout on the attention weights.
        proj_drop (float): Dropout after the output projection.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = False, attn_drop: float = 0.,
                 proj_drop: float = 0.):
        super().__init__()
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.qk = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        # qk holds [q | k], each head-major: the official reshape (B, N, 2, heads, head_dim).
        # One GEMM for q, k and v reads the tokens once (TNT's word batches are long and thin).
        weight = torch.cat([self.qk.weight, self.v.weight])
        bias = None if self.qk.bias is None else torch.cat([self.qk.bias, self.v.bias])
        q, k, v = F.linear(x, weight, bias).chunk(3, dim=-1)
        out = multihead_attention(q, k, v, self.num_heads, key_mask=key_mask,
                                  dropout_p=self.attn_drop if self.training else 0.)
        return self.proj_drop(self.proj(out))


class SqueezeExcite(nn.Module):
    """The optional SE of the outer MLP: ``x * tanh(fc(LN(mean of the tokens)))``.

    The mean skips padded sentences (``key_mask``), so that they cannot leak into the valid ones.
    """

    def __init__(self, dim: int, hidden_ratio: float = 0.25):
        super().__init__()
        hidden = int(dim * hidden_ratio)
        # Indices 0, 1, 3 as in the official Sequential, so its keys load unchanged.
        self.fc = nn.Sequential(
            nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, dim), nn.Tanh())

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if key_mask is None:
            mean = x.mean(dim=1, keepdim=True)
        else:
            weight = key_mask.to(x.dtype)[..., None]  # (1, N, 1)
            mean = (x * weight).sum(dim=1, keepdim=True) / weight.sum(dim=1, keepdim=True)
        return x * self.fc(mean)


class TNTBlock(nn.Module):
    """One TNT block: inner transformer on the words of every sentence, word-to-sentence projection,
    outer transformer on the sentences (class token first).

    Args:
        inner_dim (int): Word channels c.
        outer_dim (int): Sentence channels d.
        inner_heads (int): Heads of the inner attention.
        outer_heads (int): Heads of the outer attention.
        mlp_ratio (float): Hidden/input ratio of both MLPs.
        qkv_bias (bool): Bias in the qk and v projections.
        drop (float): Dropout after projections and MLPs.
        attn_drop (float): Attention dropout.
        drop_path (float): Stochastic depth of this block.
        se (bool): Squeeze-excitation on the outer MLP output (TNT-S+SE).
        legacy (bool): Older layout (timm ``legacy=True``, mmpretrain): LN(c) per word and a biased
            projection, no LN after it.
    """

    def __init__(self, inner_dim: int, outer_dim: int, inner_heads: int, outer_heads: int,
                 mlp_ratio: float = 4., qkv_bias: bool = False, drop: float = 0.,
                 attn_drop: float = 0., drop_path: float = 0., se: bool = False,
                 legacy: bool = False):
        super().__init__()
        self.legacy = legacy
        self.inner_norm1 = nn.LayerNorm(inner_dim)
        self.inner_attn = TNTAttention(inner_dim, inner_heads, qkv_bias, attn_drop, drop)
        self.inner_norm2 = nn.LayerNorm(inner_dim)
        self.inner_mlp = Mlp(inner_dim, int(inner_dim * mlp_ratio), drop=drop)
        if legacy:
            self.proj_norm1 = nn.LayerNorm(inner_dim)
            self.proj = nn.Linear(NUM_WORDS * inner_dim, outer_dim, bias=True)
            self.proj_norm2 = None
        else:
            self.proj_norm1 = nn.LayerNorm(NUM_WORDS * inner_dim)
            self.proj = nn.Linear(NUM_WORDS * inner_dim, outer_dim, bias=False)
            self.proj_norm2 = nn.LayerNorm(outer_dim)
        self.outer_norm1 = nn.LayerNorm(outer_dim)
        self.outer_attn = TNTAttention(outer_dim, outer_heads, qkv_bias, attn_drop, drop)
        self.outer_norm2 = nn.LayerNorm(outer_dim)
        self.outer_mlp = Mlp(outer_dim, int(outer_dim * mlp_ratio), drop=drop)
        self.se_layer = SqueezeExcite(outer_dim) if se else None
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, words: torch.Tensor, sentences: torch.Tensor,
                key_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """words: (B * N, 16, c), every sentence of every image in one batch;
        sentences: (B, 1 + N, d); key_mask: (1, 1 + N), True for real sentences, or None when no
        sentence is padding."""
        words = words + self.drop_path(self.inner_attn(self.inner_norm1(words)))
        words = words + self.drop_path(self.inner_mlp(self.inner_norm2(words)))

        batch, tokens, _ = sentences.shape
        if self.legacy:
            update = self.proj(self.proj_norm1(words).reshape(batch, tokens - 1, -1))
        else:
            update = self.proj_norm2(
                self.proj(self.proj_norm1(words.reshape(batch, tokens - 1, -1))))
        # The class token has no words: only the patch sentences receive the projection.
        sentences = torch.cat([sentences[:, :1], sentences[:, 1:] + update], dim=1)

        sentences = sentences + self.drop_path(
            self.outer_attn(self.outer_norm1(sentences), key_mask))
        mlp_out = self.outer_mlp(self.outer_norm2(sentences))
        if self.se_layer is not None:
            mlp_out = mlp_out + self.se_layer(mlp_out, key_mask)
        sentences = sentences + self.drop_path(mlp_out)
        return words, sentences


class WordEmbed(nn.Module):
    """Image -> visual words: a 7x7 stride-4 conv gives 4 x 4 words of c channels per patch.

    The official layout convolves each patch on its own (zero padding at patch borders); the legacy
    layout convolves the whole image and cuts the map into 4 x 4 word blocks.
    """

    def __init__(self, in_channels: int, inner_dim: int, legacy: bool = False):
        super().__init__()
        self.legacy = legacy
        self.proj = nn.Conv2d(in_channels, inner_dim, kernel_size=7, stride=WORD_STRIDE, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, 16 h, 16 w) -> (B * h * w, 16, c), sentences row-major, words row-major inside."""
        batch, channels, height, width = x.shape
        rows, cols = height // PATCH_SIZE, width // PATCH_SIZE
        if self.legacy:
            x = self.proj(x)
            x = x.reshape(batch, -1, rows, WORDS_PER_SIDE, cols, WORDS_PER_SIDE)
            return x.permute(0, 2, 4, 3, 5, 1).reshape(batch * rows * cols, NUM_WORDS, -1)
        x = x.reshape(batch, channels, rows, PATCH_SIZE, cols, PATCH_SIZE)
        x = x.permute(0, 2, 4, 1, 3, 5).reshape(-1, channels, PATCH_SIZE, PATCH_SIZE)
        return self.proj(x).flatten(2).transpose(1, 2)


@register_backbone(plain_name=False)
class TNT(HViTBackbone):
    """TNT backbone: `Transformer in Transformer <https://arxiv.org/abs/2103.00112>`_.

    Every 16 x 16 patch is a *sentence* of 4 x 4 *words*. Each block runs an inner transformer over
    the words of each sentence (all sentences of all images in one batch), adds a projection of the
    words to their sentence, then runs an outer transformer over the sentences and a class token.
    The model is the official one (timm's default layout): at 224 x 224 its class token gives the
    official logits.

    Dense outputs follow the paper's detection recipe: the stride-16 sentence maps after four
    blocks (default 3, 6, 9, 12) are rescaled to strides 4, 8, 16, 32 by a ViTDet simple pyramid
    (transposed convs up, identity, max-pool down). The stride-4 map is made from the sentences
    too, not from the word tokens (which do form a stride-4 grid): words never see past their own
    16 x 16 patch (inner attention is per sentence and nothing flows from sentences back to words)
    and have only c channels, while the sentence map carries global context.

    Any input of at least 32 x 32 works: it is zero-padded to whole patches (``size_divisor``), the
    sentence position embedding is interpolated (bicubic) to the real sentence grid, sentences
    lying wholly in the padding are masked out of the outer attention (and of the SE mean), and
    output i has ``ceil(H / s_i) x ceil(W / s_i)`` pixels.

    Archs (12 blocks; params with a 1000-class head, equal to timm's; ImageNet-1k top-1 at 224 from
    the paper; TNT-Ti has no released weights, its heads follow the paper's table; TNT-S+SE, 24.67M
    and 81.7, is ``dict(**TNT.arch_zoo['small'], se=True)``):

    ======  ======  ======  ==========  =========  ========  =====
    arch    c       d       inner h.    outer h.   params    top-1
    ======  ======  ======  ==========  =========  ========  =====
    tiny    12      192     2           3          6.08M     73.9
    small   24      384     4           6          23.77M    81.5
    base    40      640     4           10         65.43M    82.9
    ======  ======  ======  ==========  =========  ========  =====

    Args:
        arch (str | dict): A name of ``arch_zoo`` (``tiny``/``ti``, ``small``/``s``,
            ``base``/``b``) or a dict with keys ``embed_dims_inner``,
            ``embed_dims_outer``, ``num_layers``, ``num_heads_inner``, ``num_heads_outer`` and
            optionally ``mlp_ratio`` (4) and ``se`` (False). Default: 'small'.
        in_channels (int): Image channels. Default: 3.
        pretrain_img_size (int | tuple): Image size the sentence position embedding is stored for
            (its grid is this size // 16). Default: 224.
        out_type (str): ``'pyramid'``: NCHW maps at strides 4, 8, 16, 32 from the sentence maps
            after ``out_blocks``; ``'raw'``: those stride-16 sentence maps (d channels) themselves;
            ``'cls_token'``: the class token (B, d) after those blocks (for image classification,
            e.g. ``out_indices=(3, )`` with the default blocks gives the official features).
            Default: 'pyramid'.
        out_blocks (Sequence[int], optional): Four block numbers, 1-based, whose sentence maps make
            outputs 0..3; they may repeat (e.g. (12, 12, 12, 12): ViTDet's pyramid from the last
            map). Default: evenly spaced, (3, 6, 9, 12) for 12 blocks.
        out_indices (Sequence[int]): Outputs (0..3) to return. Blocks after the last one needed are
            not run (their parameters get no gradient). Default: (0, 1, 2, 3).
        final_norm (bool): Apply the final LayerNorm to the sentences after the last block (official
            classifier). Default: True.
        size_divisor (int): Pad inputs to a multiple of this (a multiple of 16). Larger values
            bucket input shapes (fewer recompilations, static shapes for deployment) without
            changing the valid outputs: whole padded sentences are masked out. Default: 16.
        qkv_bias (bool): Bias in the qk and v projections. Default: False (official).
        drop_rate (float): Dropout after position embedding, projections and MLPs. Default: 0.
        attn_drop_rate (float): Attention dropout. Default: 0.
        drop_path_rate (float): Stochastic depth, linear from 0 to this over the blocks.
            Default: 0.1.
        legacy (bool): Build the older layout of timm ``legacy=True`` and mmpretrain's TNT (its
            weights differ). Default: False.
        pyramid_norm_cfg (dict): Norm inside the stride-4 branch of the pyramid.
            Default: LayerNorm over channels, eps 1e-6.
        frozen_stages (int): -1: nothing; 0: the embeddings (patch embed, sentence stem, class
            token, position embeddings); k >= 1: those and blocks 1..k (k = num_layers also freezes
            the final norm). Default: -1.
        norm_eval (bool): Keep BN layers (only in a BN pyramid norm) in eval mode. Default: False.
        with_cp (bool): Gradient checkpointing of each block. Default: False.
        pretrained (str, optional): Deprecated, use ``init_cfg``.
        init_cfg (dict, optional): e.g. ``dict(type='Pretrained', checkpoint=..., prefix=...)``:
            official, timm and mmpretrain TNT checkpoints are converted on load.
    """

    arch_zoo = {
        **dict.fromkeys(['ti', 'tiny'], {
            'embed_dims_inner': 12,
            'embed_dims_outer': 192,
            'num_layers': 12,
            'num_heads_inner': 2,
            'num_heads_outer': 3
        }),
        **dict.fromkeys(['s', 'small'], {
            'embed_dims_inner': 24,
            'embed_dims_outer': 384,
            'num_layers': 12,
            'num_heads_inner': 4,
            'num_heads_outer': 6
        }),
        **dict.fromkeys(['b', 'base'], {
            'embed_dims_inner': 40,
            'embed_dims_outer': 640,
            'num_layers': 12,
            'num_heads_inner': 4,
            'num_heads_outer': 10
        }),
    }
    essential_keys = ('embed_dims_inner', 'embed_dims_outer', 'num_layers', 'num_heads_inner',
                      'num_heads_outer')
    optional_keys = {'mlp_ratio': 4., 'se': False}

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 in_channels: int = 3,
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 out_type: str = 'pyramid',
                 out_blocks: Optional[Sequence[int]] = None,
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 final_norm: bool = True,
                 size_divisor: int = PATCH_SIZE,
                 qkv_bias: bool = False,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 legacy: bool = False,
                 pyramid_norm_cfg: dict = dict(type='LN2d', eps=1e-6),
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 pretrained: Optional[str] = None,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        super().__init__(in_channels=in_channels, out_indices=out_indices,
                         frozen_stages=frozen_stages, norm_eval=norm_eval, with_cp=with_cp,
                         pretrained=pretrained, init_cfg=init_cfg)
        settings = self._parse_arch(arch)
        inner_dim, outer_dim = settings['embed_dims_inner'], settings['embed_dims_outer']
        depth = settings['num_layers']
        self.arch_name = self._describe(inner_dim, outer_dim, depth)
        if legacy:
            self.arch_name += ' (legacy)'
        self.inner_dim, self.outer_dim, self.num_layers = inner_dim, outer_dim, depth
        self.legacy = legacy

        if out_type not in OUT_TYPES:
            raise ValueError(f'TNT: out_type must be one of {OUT_TYPES}, got {out_type!r}')
        self.out_type = out_type
        if out_blocks is None:
            out_blocks = [depth * (i + 1) // self.num_outputs for i in range(self.num_outputs)]
        out_blocks = tuple(int(b) for b in out_blocks)
        if len(out_blocks) != self.num_outputs or any(not 1 <= b <= depth for b in out_blocks):
            raise ValueError(f'TNT: out_blocks must be {self.num_outputs} block numbers in '
                             f'1..{depth} (1-based), got {out_blocks}')
        self.out_blocks = out_blocks
        if not (isinstance(size_divisor, int) and size_divisor > 0
                and size_divisor % PATCH_SIZE == 0):
            raise ValueError(f'TNT: size_divisor must be a positive multiple of {PATCH_SIZE}, '
                             f'got {size_divisor}')
        self.size_divisor = size_divisor
        if not -1 <= frozen_stages <= depth:
            raise ValueError(f'TNT: frozen_stages must be in -1..{depth} (num_layers), '
                             f'got {frozen_stages}')
        if isinstance(pretrain_img_size, int):
            pretrain_img_size = (pretrain_img_size, pretrain_img_size)
        self.pos_grid = (pretrain_img_size[0] // PATCH_SIZE, pretrain_img_size[1] // PATCH_SIZE)
        if min(self.pos_grid) < 1:
            raise ValueError(f'TNT: pretrain_img_size must be at least {PATCH_SIZE}, '
                             f'got {pretrain_img_size}')

        # Embeddings, with the official names.
        self.patch_embed = WordEmbed(in_channels, inner_dim, legacy)
        self.inner_pos = nn.Parameter(torch.zeros(1, NUM_WORDS, inner_dim))
        self.proj_norm1 = nn.LayerNorm(NUM_WORDS * inner_dim)
        self.proj = nn.Linear(NUM_WORDS * inner_dim, outer_dim)
        self.proj_norm2 = nn.LayerNorm(outer_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, outer_dim))
        self.outer_pos = nn.Parameter(
            torch.zeros(1, 1 + self.pos_grid[0] * self.pos_grid[1], outer_dim))
        self.pos_drop = nn.Dropout(drop_rate)

        rates = torch.linspace(0, drop_path_rate, depth).tolist()
        self.blocks = nn.ModuleList([
            TNTBlock(inner_dim, outer_dim, settings['num_heads_inner'], settings['num_heads_outer'],
                     mlp_ratio=settings['mlp_ratio'], qkv_bias=qkv_bias, drop=drop_rate,
                     attn_drop=attn_drop_rate, drop_path=rates[i], se=settings['se'], legacy=legacy)
            for i in range(depth)
        ])
        self.final_norm = final_norm
        self.norm = nn.LayerNorm(outer_dim) if final_norm else None

        self.pyramid = None
        if out_type == 'pyramid':
            self.pyramid = SimplePyramid(outer_dim, [PATCH_SIZE / s for s in OUT_STRIDES],
                                         norm_cfg=pyramid_norm_cfg)
            # Output i keeps the key pyramid.ops.i; ops of unused outputs hold no parameters, so
            # that none is left without gradient (DDP) and checkpoints fit any out_indices.
            for i in range(self.num_outputs):
                if i not in self.out_indices:
                    self.pyramid.ops[i] = nn.Identity()

        self._init_params()
        self._register_load_state_dict_pre_hook(self._resize_pos_hook)
        self._freeze_stages()

    # --- construction -------------------------------------------------------------------------
    def _parse_arch(self, arch: Union[str, dict]) -> dict:
        settings = self.parse_arch(arch)
        for dim, heads in (('embed_dims_inner', 'num_heads_inner'),
                           ('embed_dims_outer', 'num_heads_outer')):
            if settings[dim] % settings[heads]:
                raise ValueError(f'TNT: {dim}={settings[dim]} is not divisible by '
                                 f'{heads}={settings[heads]}')
        return settings

    def _init_params(self) -> None:
        # The official initialisation: truncated normal (std .02) for tokens and linears, unit LNs.
        for param in (self.cls_token, self.outer_pos, self.inner_pos):
            trunc_normal_(param, std=.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                trunc_normal_(module.weight, std=.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    # --- HViTBackbone hooks -------------------------------------------------------------------
    def stage_modules(self, index: int) -> List[nn.Module]:
        if index == 0:
            return [self.patch_embed, self.proj_norm1, self.proj, self.proj_norm2]
        modules = [self.blocks[index - 1]]
        if index == self.num_layers and self.norm is not None:
            modules.append(self.norm)
        return modules

    def _freeze_stages(self) -> None:
        super()._freeze_stages()
        if self.frozen_stages >= 0:  # the embeddings' own parameters belong to stage 0
            for param in (self.cls_token, self.outer_pos, self.inner_pos):
                param.requires_grad = False

    def convert_checkpoint(self, state_dict: dict) -> dict:
        converted = convert_tnt_checkpoint(state_dict)
        # The classifier is not part of the backbone.
        return OrderedDict((k, v) for k, v in converted.items() if not k.startswith('head.'))

    def describe_checkpoint(self, state_dict: dict) -> str:
        return describe_tnt_checkpoint(state_dict)

    def is_resizable_key(self, key: str) -> bool:
        return key == 'outer_pos'

    @classmethod
    def _describe(cls, inner_dim: int, outer_dim: int, depth: int) -> str:
        for name, arch in cls.arch_zoo.items():
            if len(name) > 2 and (arch['embed_dims_inner'], arch['embed_dims_outer'],
                                  arch['num_layers']) == (inner_dim, outer_dim, depth):
                return name
        return f'custom (embed_dims_inner={inner_dim}, embed_dims_outer={outer_dim}, ' \
               f'num_layers={depth})'

    def _resize_pos_hook(self, state_dict, prefix, *args) -> None:
        """Resize a checkpoint's sentence position embedding trained at another image size."""
        key = prefix + 'outer_pos'
        pos = state_dict.get(key)
        if pos is None or pos.shape == self.outer_pos.shape or pos.shape[-1] != self.outer_dim:
            return
        tokens = pos.shape[1] - 1
        side = math.isqrt(tokens)
        if side * side != tokens:
            raise ValueError(f'TNT: cannot resize {key} of shape {tuple(pos.shape)}: its '
                             f'{tokens} patch positions do not form a square grid')
        grid = pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
        grid = resize_pos_map(grid.float(), self.pos_grid).to(pos.dtype)
        state_dict[key] = torch.cat([pos[:, :1], grid.flatten(2).transpose(1, 2)], dim=1)

    # --- forward ------------------------------------------------------------------------------
    def _sentence_pos(self, real: Tuple[int, int], padded: Tuple[int, int]) -> torch.Tensor:
        """(1, 1 + padded grid, d): class position, then the grid interpolated to the real sentence
        grid; padded sentences get zeros (they are masked out anyway)."""
        grid = self.outer_pos[:, 1:].reshape(1, *self.pos_grid, -1).permute(0, 3, 1, 2)
        grid = resize_pos_map(grid, real)
        grid = pad_nchw(grid, padded[0] - real[0], padded[1] - real[1])
        return torch.cat([self.outer_pos[:, :1], grid.flatten(2).transpose(1, 2)], dim=1)

    def _run_block(self, block: nn.Module, words, sentences, key_mask):
        if self.with_cp and sentences.requires_grad:
            return cp.checkpoint(block, words, sentences, key_mask, use_reentrant=False)
        return block(words, sentences, key_mask)

    def forward(self, x: torch.Tensor) -> tuple:
        self.check_input(x)
        batch, _, height, width = x.shape
        pad_h, pad_w = padding_to_multiple(height, width, self.size_divisor)
        x = pad_nchw(x, pad_h, pad_w)
        real = (math.ceil(height / PATCH_SIZE), math.ceil(width / PATCH_SIZE))
        padded = (x.shape[2] // PATCH_SIZE, x.shape[3] // PATCH_SIZE)
        key_mask = None  # None keeps SDPA unmasked when no sentence is wholly padding
        if real != padded:
            valid = torch.zeros(padded, dtype=torch.bool, device=x.device)
            valid[:real[0], :real[1]] = True
            # The class token is always a real key.
            key_mask = torch.cat([valid.new_ones(1), valid.flatten()])[None]

        words = self.patch_embed(x) + self.inner_pos  # (B * N, 16, c)
        # Sentence stem: LN(16c) -> Linear -> LN(d) of the flattened words of each patch.
        sentences = words.reshape(batch, -1, NUM_WORDS * self.inner_dim)
        sentences = self.proj_norm2(self.proj(self.proj_norm1(sentences)))
        sentences = torch.cat([self.cls_token.expand(batch, -1, -1), sentences], dim=1)
        sentences = self.pos_drop(sentences + self._sentence_pos(real, padded))

        wanted = {self.out_blocks[i] - 1: i for i in self.out_indices}
        taken = {}
        for index, block in enumerate(self.blocks[:max(wanted) + 1]):
            words, sentences = self._run_block(block, words, sentences, key_mask)
            if index == self.num_layers - 1 and self.norm is not None:
                sentences = self.norm(sentences)
            if index in wanted:
                taken[index] = sentences

        outs = []
        for i in self.out_indices:
            tokens = taken[self.out_blocks[i] - 1]
            if self.out_type == 'cls_token':
                outs.append(tokens[:, 0])
                continue
            fmap = tokens[:, 1:].reshape(batch, *padded, -1)[:, :real[0], :real[1]]
            fmap = fmap.permute(0, 3, 1, 2).contiguous()
            if self.pyramid is not None:
                stride = OUT_STRIDES[i]
                # Upsampled maps of a partial last patch reach into the padding: crop them.
                fmap = self.pyramid.ops[i](fmap)[..., :math.ceil(height / stride),
                                                 :math.ceil(width / stride)]
            outs.append(fmap)
        return tuple(outs)


# --- checkpoints ------------------------------------------------------------------------------
# timm block names -> ours (official); mmpretrain's are handled by _from_mmpretrain.
_TIMM_BLOCK_NAMES = {
    'norm_in': 'inner_norm1',
    'attn_in': 'inner_attn',
    'norm_mlp_in': 'inner_norm2',
    'mlp_in': 'inner_mlp',
    'norm1_proj': 'proj_norm1',
    'proj': 'proj',
    'norm2_proj': 'proj_norm2',
    'norm_out': 'outer_norm1',
    'attn_out': 'outer_attn',
    'norm_mlp': 'outer_norm2',
    'mlp': 'outer_mlp',
}
_TIMM_TOP_NAMES = {
    'pixel_embed': 'patch_embed',
    'pixel_pos': 'inner_pos',
    'patch_pos': 'outer_pos',
    'norm1_proj': 'proj_norm1',
    'norm2_proj': 'proj_norm2',
}


def detect_tnt_layout(state_dict: Dict[str, torch.Tensor]) -> str:
    """'official' (also ours), 'timm' or 'mmpretrain'; raises for anything else."""
    keys = set(state_dict)
    if 'outer_pos' in keys and 'patch_embed.proj.weight' in keys:
        return 'official'
    if 'patch_pos' in keys and 'pixel_embed.proj.weight' in keys:
        return 'mmpretrain' if any(k.startswith('layers.') for k in keys) else 'timm'
    raise ValueError('not a TNT checkpoint of a known layout (official/mmhvit, timm or '
                     'mmpretrain): no outer_pos + patch_embed.proj or patch_pos + pixel_embed.proj '
                     f'keys; first keys: {sorted(keys)[:6]}')


def _from_timm(state_dict):
    out = OrderedDict()
    for key, value in state_dict.items():
        match = re.match(r'blocks\.(\d+)\.([a-z0-9_]+)\.(.+)', key)
        if match:
            index, name, rest = match.groups()
            key = f'blocks.{index}.{_TIMM_BLOCK_NAMES.get(name, name)}.{rest}'
        else:
            head, _, rest = key.partition('.')
            key = _TIMM_TOP_NAMES.get(head, head) + ('.' + rest if rest else '')
        if key == 'inner_pos':  # (1, c, 4, 4) map -> (1, 16, c) tokens
            value = value.flatten(2).transpose(1, 2)
        out[key] = value
    return out


def _from_mmpretrain(state_dict):
    """mmpretrain's (legacy-layout) TNT: packed in_proj attention and FFN layers."""
    out = OrderedDict()
    for key, value in state_dict.items():
        match = re.match(r'layers\.(\d+)\.(inner_block|outer_block|norm_proj|projection)\.(.+)',
                         key)
        if not match:
            head, _, rest = key.partition('.')
            key = {'projection': 'proj'}.get(head, _TIMM_TOP_NAMES.get(head, head)) + \
                ('.' + rest if rest else '')
            out[key] = value.flatten(2).transpose(1, 2) if key == 'inner_pos' else value
            continue
        index, part, rest = match.groups()
        prefix = f'blocks.{index}.'
        if part in ('norm_proj', 'projection'):
            name = {'norm_proj': 'proj_norm1', 'projection': 'proj'}[part]
            out[f'{prefix}{name}.{rest}'] = value
            continue
        side = 'inner' if part == 'inner_block' else 'outer'
        if rest == 'attn.attn.in_proj_weight':  # [q | k | v] -> qk, v
            dim = value.shape[1]
            out[f'{prefix}{side}_attn.qk.weight'] = value[:2 * dim]
            out[f'{prefix}{side}_attn.v.weight'] = value[2 * dim:]
            continue
        if rest == 'attn.attn.in_proj_bias':
            dim = value.shape[0] // 3
            out[f'{prefix}{side}_attn.qk.bias'] = value[:2 * dim]
            out[f'{prefix}{side}_attn.v.bias'] = value[2 * dim:]
            continue
        for old, new in (('norm_attn.', 'norm1.'), ('norm_ffn.', 'norm2.'),
                         ('attn.attn.out_proj.', 'attn.proj.'), ('ffn.layers.0.0.', 'mlp.fc1.'),
                         ('ffn.layers.1.', 'mlp.fc2.')):
            if rest.startswith(old):
                out[f'{prefix}{side}_{new}{rest[len(old):]}'] = value
                break
        else:
            out[key] = value  # unknown: kept, so that loading reports it
    return out


def convert_tnt_checkpoint(state_dict: Dict[str, torch.Tensor]) -> 'OrderedDict[str, torch.Tensor]':
    """Convert a TNT state dict of the official, timm or mmpretrain layout to ours.

    Ours is the official layout (``patch_embed``, ``inner_pos`` (1, 16, c), ``outer_pos``,
    ``blocks.i.{inner,outer}_{norm1,attn,norm2,mlp}``, ``proj_norm1/proj/proj_norm2``, ``norm``),
    with the classifier as ``head.weight``/``head.bias``; our own keys pass through unchanged. The
    official file's unused ``outer_tokens`` is dropped. A ``backbone.`` prefix (an MMPretrain
    classifier, e.g. written by ``tools/model_converters/tnt2mmhvit.py``) is removed and its
    ``head.fc.*`` becomes ``head.*``. Legacy-layout weights keep their legacy shapes: load them
    into ``TNT(legacy=True)``.
    """
    if any(k.startswith('backbone.') for k in state_dict):
        state_dict = OrderedDict((k[len('backbone.'):] if k.startswith('backbone.') else k, v)
                                 for k, v in state_dict.items())
    layout = detect_tnt_layout(state_dict)
    if layout == 'timm':
        state_dict = _from_timm(state_dict)
    elif layout == 'mmpretrain':
        state_dict = _from_mmpretrain(state_dict)
    return OrderedDict(('head.' + k[len('head.fc.'):] if k.startswith('head.fc.') else k, v)
                       for k, v in state_dict.items() if k != 'outer_tokens')


def describe_tnt_checkpoint(state_dict: Dict[str, torch.Tensor]) -> str:
    """The arch a converted state dict was made for: an ``arch_zoo`` name or the dims and depth."""
    try:
        inner_dim = state_dict['inner_pos'].shape[-1]
        outer_dim = state_dict['outer_pos'].shape[-1]
    except KeyError:
        return 'unknown (no inner_pos/outer_pos)'
    depth = len({k.split('.')[1] for k in state_dict if k.startswith('blocks.')})
    name = TNT._describe(inner_dim, outer_dim, depth)
    legacy = 'blocks.0.proj.bias' in state_dict
    return name + (' (legacy)' if legacy else '')
