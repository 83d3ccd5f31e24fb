"""TNT's layers: the stem (:class:`TNTEmbed`), the block (:class:`TNTBlock`: inner word layer,
word-to-sentence update, outer sentence layer), the stage (:class:`TNTStage`) and the word maps a
pyramid output can add.
PyramidTNT reuses :class:`WordsToSentence`; the FSDP wrap policy wraps :class:`TNTBlock`.

`Transformer in Transformer <https://arxiv.org/abs/2103.00112>`_ (Han et al., NeurIPS 2021),
following the official code (``huawei-noah/Efficient-AI-Backbones``, ``tnt_pytorch/tnt.py``).
"""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import ConvModule, build_norm_layer

from .norm import build_norm2d
from .pooling import pool_cells
from .pos_embed import resize_pos_map
from .stage import BackboneStage
from .transformer import ClassTokenWindowAttention, TokenGrids, TransformerLayer
from .windows import pad_nchw

# The official layout: 16 x 16-pixel sentences of 4 x 4 words (the arch keys patch_size and
# word_size change it).
PATCH_SIZE = 16
WORD_SIZE = 4
NUM_WORDS = (PATCH_SIZE // WORD_SIZE)**2


class SqueezeExcite(nn.Module):
    """The optional SE of the outer MLP: ``x * tanh(fc(LN(mean of the tokens)))``.

    The mean skips padded sentences (``key_mask``), so that they cannot leak into the valid ones.
    """

    def __init__(self, embed_dims: int, hidden_ratio: float = 0.25):
        super().__init__()
        hidden = int(embed_dims * hidden_ratio)
        # Indices 0, 1, 3 as in the official Sequential, so its keys map one to one.
        self.fc = nn.Sequential(
            nn.LayerNorm(embed_dims), nn.Linear(embed_dims, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, embed_dims), nn.Tanh())

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if key_mask is None:
            mean = x.mean(dim=1, keepdim=True)
        else:
            weight = key_mask.to(x.dtype)[..., None]  # (1, N, 1)
            mean = (x * weight).sum(dim=1, keepdim=True) / weight.sum(dim=1, keepdim=True)
        return x * self.fc(mean)


class SentenceLayer(TransformerLayer):
    """The outer transformer layer, with TNT's optional squeeze-excitation of its MLP output and
    the optional windows of its attention (:class:`ClassTokenWindowAttention`, the class token
    global). The SE's mean stays global in windowed layers: it is one O(N) average, not
    attention."""

    def __init__(self, embed_dims: int, num_heads: int, se: bool = False,
                 window_size: Optional[int] = None, qkv_bias: bool = False,
                 drop_rate: float = 0., attn_drop_rate: float = 0., **kwargs):
        attn = ClassTokenWindowAttention(embed_dims, num_heads, qkv_bias=qkv_bias,
                                         attn_drop_rate=attn_drop_rate, proj_drop_rate=drop_rate,
                                         window_size=window_size)
        super().__init__(embed_dims, num_heads, qkv_bias=qkv_bias, drop_rate=drop_rate,
                         attn_drop_rate=attn_drop_rate, attn=attn, **kwargs)
        self.se = SqueezeExcite(self.norm2.normalized_shape[0]) if se else None

    def feed_forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor]) -> torch.Tensor:
        out = self.mlp(x, self.norm2)
        return out if self.se is None else out + self.se(out, key_mask)


class WordsToSentence(nn.Module):
    """The update a sentence receives from its words: ``norm2(proj(norm1(flattened words)))``.

    ``legacy``: the older layout (timm ``legacy=True``, mmpretrain): norm1 over each word's c
    channels, a biased projection and no norm2.
    """

    def __init__(self, inner_dims: int, embed_dims: int, norm_cfg: dict, legacy: bool = False,
                 num_words: int = NUM_WORDS):
        super().__init__()
        self.legacy = legacy
        flat = num_words * inner_dims
        self.norm1 = build_norm_layer(norm_cfg, inner_dims if legacy else flat)[1]
        self.proj = nn.Linear(flat, embed_dims, bias=legacy)
        self.norm2 = None if legacy else build_norm_layer(norm_cfg, embed_dims)[1]

    def forward(self, words: torch.Tensor, batch: int) -> torch.Tensor:
        """(B * N, 16, c) words -> (B, N, d) sentence updates."""
        if self.legacy:
            return self.proj(self.norm1(words).reshape(batch, -1, words.shape[1:].numel()))
        return self.norm2(self.proj(self.norm1(words.reshape(batch, -1,
                                                             words.shape[1:].numel()))))


class TNTBlock(nn.Module):
    """One TNT block: inner transformer on the words of every sentence, word-to-sentence update,
    outer transformer on the sentences (class token first).

    Args:
        inner_dims (int): Word channels c.
        embed_dims (int): Sentence channels d.
        inner_num_heads (int): Heads of the inner attention.
        num_heads (int): Heads of the outer attention.
        se (bool): Squeeze-excitation on the outer MLP output (TNT-S+SE).
        legacy (bool): The older word-to-sentence layout (see :class:`WordsToSentence`).
        num_words (int): Words per sentence.
        window_size (int, optional): Windows of the outer attention
            (:class:`ClassTokenWindowAttention`); None: global.
        **layer_kwargs: ``mlp_ratio``, ``qkv_bias``, ``drop_rate``, ``attn_drop_rate``,
            ``drop_path_rate``, ``norm_cfg``, ``act_cfg`` of both transformer layers.
    """

    def __init__(self, inner_dims: int, embed_dims: int, inner_num_heads: int, num_heads: int,
                 se: bool = False, legacy: bool = False, num_words: int = NUM_WORDS,
                 window_size: Optional[int] = None, **layer_kwargs):
        super().__init__()
        self.inner = TransformerLayer(inner_dims, inner_num_heads, **layer_kwargs)
        self.word_proj = WordsToSentence(inner_dims, embed_dims, layer_kwargs['norm_cfg'],
                                         legacy=legacy, num_words=num_words)
        self.outer = SentenceLayer(embed_dims, num_heads, se=se, window_size=window_size,
                                   **layer_kwargs)

    def forward(self, words: torch.Tensor, sentences: torch.Tensor,
                key_mask: Optional[torch.Tensor] = None,
                grid: Optional[TokenGrids] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """words: (B * N, 16, c), every sentence of every image in one batch; sentences:
        (B, 1 + N, d); key_mask: (1, 1 + N), True for real sentences, or None when none is
        padding; grid: the real and padded sentence grids (needed by windowed blocks)."""
        words = self.inner(words)
        update = self.word_proj(words, sentences.shape[0])
        # The class token has no words: only the patch sentences receive the update.
        sentences = torch.cat([sentences[:, :1], sentences[:, 1:] + update], dim=1)
        return words, self.outer(sentences, key_mask, grid=grid)


class TNTEmbed(nn.Module):
    """Image -> (words, sentences): the stem.

    A 7x7 stride-4 conv gives 4 x 4 words of c channels per 16 x 16 patch (the official layout
    convolves each patch on its own, zero padding at patch borders; the legacy layout convolves
    the whole image), plus a word position embedding shared by all sentences. ``conv_stem``
    replaces the 7x7 conv by a convolutional stem over the whole image (`Xiao et al. 2021
    <https://arxiv.org/abs/2106.14881>`_): one 3x3 stride-2 conv + BN + ReLU per halving (widths
    d / 2^k up to d / 2), then a 1x1 conv to c. A sentence starts
    as ``norm2(proj(norm1(its flattened words)))``; a class token is prepended and the sentence
    position embedding (interpolated to the real sentence grid) added.
    """

    def __init__(self, in_channels: int, inner_dims: int, embed_dims: int,
                 pos_grid: Tuple[int, int], norm_cfg: dict, drop_rate: float = 0.,
                 legacy: bool = False, patch_size: int = PATCH_SIZE, word_size: int = WORD_SIZE,
                 conv_stem: bool = False):
        super().__init__()
        self.legacy, self.conv_stem = legacy, conv_stem
        self.pos_grid = pos_grid
        self.patch_size = patch_size
        self.words_per_side = patch_size // word_size
        num_words = self.words_per_side**2
        if conv_stem:
            halvings = int(math.log2(word_size))
            widths = [in_channels] + [embed_dims // 2**(halvings - k) for k in range(halvings)]
            self.word_embed = nn.Sequential(*[
                ConvModule(c_in, c_out, 3, stride=2, padding=1, norm_cfg=dict(type='BN'))
                for c_in, c_out in zip(widths, widths[1:])
            ], nn.Conv2d(widths[-1], inner_dims, 1))
        else:
            self.word_embed = nn.Conv2d(in_channels, inner_dims, kernel_size=7, stride=word_size,
                                        padding=3)
        self.word_pos_embed = nn.Parameter(torch.zeros(1, num_words, inner_dims))
        self.norm1 = build_norm_layer(norm_cfg, num_words * inner_dims)[1]
        self.proj = nn.Linear(num_words * inner_dims, embed_dims)
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + pos_grid[0] * pos_grid[1], embed_dims))
        self.pos_drop = nn.Dropout(drop_rate)

    def words(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, p h, p w) -> (B * h * w, words, c), sentences row-major, words row-major
        inside."""
        batch, channels, height, width = x.shape
        patch, side = self.patch_size, self.words_per_side
        rows, cols = height // patch, width // patch
        if self.legacy or self.conv_stem:
            x = self.word_embed(x)
            x = x.reshape(batch, -1, rows, side, cols, side)
            x = x.permute(0, 2, 4, 3, 5, 1).reshape(batch * rows * cols, side * side, -1)
        else:
            x = x.reshape(batch, channels, rows, patch, cols, patch)
            x = x.permute(0, 2, 4, 1, 3, 5).reshape(-1, channels, patch, patch)
            x = self.word_embed(x).flatten(2).transpose(1, 2)
        return x + self.word_pos_embed

    def sentence_pos(self, real: Tuple[int, int], padded: Tuple[int, int]) -> torch.Tensor:
        """(1, 1 + padded grid, d): class position, then the grid interpolated to the real
        sentence grid; padded sentences get zeros (they are masked out anyway)."""
        grid = self.pos_embed[:, 1:].reshape(1, *self.pos_grid, -1).permute(0, 3, 1, 2)
        grid = resize_pos_map(grid, real)
        grid = pad_nchw(grid, padded[0] - real[0], padded[1] - real[1])
        return torch.cat([self.pos_embed[:, :1], grid.flatten(2).transpose(1, 2)], dim=1)

    def forward(self, x: torch.Tensor, real: Tuple[int, int]):
        """A padded image -> words (B * N, 16, c) and sentences (B, 1 + N, d)."""
        batch = x.shape[0]
        padded = (x.shape[2] // self.patch_size, x.shape[3] // self.patch_size)
        words = self.words(x)
        sentences = words.reshape(batch, -1, words.shape[1:].numel())
        sentences = self.norm2(self.proj(self.norm1(sentences)))
        sentences = torch.cat([self.cls_token.expand(batch, -1, -1), sentences], dim=1)
        return words, self.pos_drop(sentences + self.sentence_pos(real, padded))


class WordMap(nn.Module):
    """The word tokens of every sentence laid out in place as an NCHW map (stride: the word size),
    average-pooled to an output's stride, projected to the output's channels and normalised: the
    local detail a pyramid output finer than the sentences adds to its upsampled sentence map."""

    def __init__(self, inner_dims: int, embed_dims: int, words_per_side: int, pool: int,
                 norm_cfg: dict):
        super().__init__()
        self.words_per_side, self.pool = words_per_side, pool
        self.proj = nn.Conv2d(inner_dims, embed_dims, 1)
        self.norm = build_norm2d(norm_cfg, embed_dims)

    def forward(self, words: torch.Tensor, batch: int, padded: Tuple[int, int]) -> torch.Tensor:
        """(B * N, side * side, c) words of a padded (h, w) sentence grid -> (B, d, h * side /
        pool, w * side / pool)."""
        fmap = words_to_map(words, batch, padded, self.words_per_side)
        return self.norm(self.proj(pool_cells(fmap, self.pool, 'avg')))


def words_to_map(words: torch.Tensor, batch: int, padded: Tuple[int, int],
                 words_per_side: int) -> torch.Tensor:
    """(B * h * w, side * side, c) words (sentences and words row-major) -> the (B, c, h * side,
    w * side) map they tile, each word at its pixel: the inverse of :meth:`TNTEmbed.words`."""
    side, channels = words_per_side, words.shape[-1]
    fmap = words.reshape(batch, padded[0], padded[1], side, side, channels)
    return fmap.permute(0, 5, 1, 3, 2, 4).reshape(batch, channels, padded[0] * side,
                                                  padded[1] * side)


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
