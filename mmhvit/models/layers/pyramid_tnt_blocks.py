"""The modules PyramidTNT stacks: the conv stem, the word and sentence merges between stages,
the block (inner word layer, word-to-sentence update, outer layer with pooled keys), the stage
with its learned attention bias, and the upsampling of the dense outputs.

`PyramidTNT <https://arxiv.org/abs/2201.00978>`_ (Han et al., 2022), following the official code
(``huawei-noah/Efficient-AI-Backbones``, ``tnt_pytorch/pyramid_tnt.py``).
"""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer

from ..converters.ptnt import NUM_WORDS
from .export import is_exporting
from .lean import lean_layer
from .norm import build_norm2d
from .pos_embed import AttnBiasRows, resize_attn_bias, resize_pos_map
from .stage import BackboneStage
from .tnt_blocks import WordsToSentence
from .transformer import ReducedAttention, TransformerLayer
from .windows import ceil_div, pad_nchw, padding_to_multiple

WORDS_PER_SIDE = 4  # a sentence holds 4 x 4 words: NUM_WORDS, the official layout's


def conv_norm_relu(in_channels: int, out_channels: int, stride: int,
                   norm_cfg: dict) -> List[nn.Module]:
    """A 3x3 conv (with bias, as the official stem), a norm and ReLU."""
    return [nn.Conv2d(in_channels, out_channels, 3, stride, 1),
            build_norm2d(norm_cfg, out_channels), nn.ReLU(inplace=True)]


class PyramidTNTStem(nn.Module):
    """Image -> words and sentences: the official ``Stem`` and position embeddings.

    A stride-2 conv (3 -> 2c) feeds two branches: one conv (2c -> c) gives the words at stride 2,
    every 4 x 4 block of them the words of one sentence; three convs (strides 2, 2, 1; 4c, 8c, d
    channels) give the sentences at stride 8. Words get a position embedding shared by all
    sentences; sentences one per grid position, resized (bicubic) to the real sentence grid.
    """

    def __init__(self, in_channels: int, inner_dims: int, embed_dims: int,
                 pos_grid: Tuple[int, int], norm_cfg: dict, drop_rate: float = 0.):
        super().__init__()
        c = inner_dims
        self.pos_grid = pos_grid
        self.common_conv = nn.Sequential(*conv_norm_relu(in_channels, 2 * c, 2, norm_cfg))
        self.inner_convs = nn.Sequential(*conv_norm_relu(2 * c, c, 1, norm_cfg))
        self.outer_convs = nn.Sequential(*conv_norm_relu(2 * c, 4 * c, 2, norm_cfg),
                                         *conv_norm_relu(4 * c, 8 * c, 2, norm_cfg),
                                         *conv_norm_relu(8 * c, embed_dims, 1, norm_cfg))
        self.word_pos_embed = nn.Parameter(torch.zeros(1, NUM_WORDS, c))
        self.pos_embed = nn.Parameter(torch.zeros(1, pos_grid[0] * pos_grid[1], embed_dims))
        self.pos_drop = nn.Dropout(drop_rate)

    def forward(self, x: torch.Tensor):
        """A (B, C, 8 h, 8 w) image -> words (B * h * w, 16, c) (sentences row-major, words
        row-major inside), sentences (B, h * w, d) and the grid (h, w)."""
        x = self.common_conv(x)
        words = self.inner_convs(x)
        batch, channels, height, width = words.shape
        grid = (height // WORDS_PER_SIDE, width // WORDS_PER_SIDE)
        words = words.reshape(batch, channels, grid[0], WORDS_PER_SIDE, grid[1], WORDS_PER_SIDE)
        words = words.permute(0, 2, 4, 3, 5, 1).reshape(-1, NUM_WORDS, channels)
        sentences = self.outer_convs(x).flatten(2).transpose(1, 2)
        pos = self.pos_embed.reshape(1, *self.pos_grid, -1).permute(0, 3, 1, 2)
        pos = resize_pos_map(pos, grid).flatten(2).transpose(1, 2)
        return words + self.word_pos_embed, sentences + self.pos_drop(pos), grid


class WordMerge(nn.Module):
    """The official ``WordAggregation``: a norm per word, then the words of every 2 x 2 group of
    sentences (an 8 x 8 word grid) go through a 3x3 stride-2 conv of their own (zero padding at
    the group's border) to the 4 x 4 words of the merged sentence. An odd sentence grid gets a
    zero row / column of sentences at the bottom / right, as the official code pads it."""

    def __init__(self, in_dims: int, out_dims: int, norm_cfg: dict):
        super().__init__()
        self.norm = build_norm_layer(norm_cfg, in_dims)[1]
        self.conv = nn.Conv2d(in_dims, out_dims, 3, 2, 1)

    def forward(self, words: torch.Tensor, grid: Tuple[int, int]) -> torch.Tensor:
        rows, cols = grid
        channels = words.shape[-1]
        side = WORDS_PER_SIDE
        x = self.norm(words).reshape(-1, rows, cols, side, side, channels)
        x = x.permute(0, 5, 1, 3, 2, 4).reshape(-1, channels, rows * side, cols * side)
        pad_rows, pad_cols = padding_to_multiple(rows, cols, 2)
        x = pad_nchw(x, pad_rows * side, pad_cols * side)
        x = x.reshape(-1, channels, ceil_div(rows, 2), 2 * side, ceil_div(cols, 2), 2 * side)
        x = x.permute(0, 2, 4, 1, 3, 5).reshape(-1, channels, 2 * side, 2 * side)
        return self.conv(x).flatten(2).transpose(1, 2)


class SentenceMerge(nn.Module):
    """The official ``SentenceAggregation``: norm, then a 3x3 stride-2 conv over the sentence map
    (ceil(h / 2) x ceil(w / 2) sentences)."""

    def __init__(self, in_dims: int, out_dims: int, norm_cfg: dict):
        super().__init__()
        self.norm = build_norm_layer(norm_cfg, in_dims)[1]
        self.conv = nn.Conv2d(in_dims, out_dims, 3, 2, 1)

    def forward(self, sentences: torch.Tensor, grid: Tuple[int, int]):
        x = self.norm(sentences).transpose(1, 2).reshape(sentences.shape[0], -1, *grid)
        x = self.conv(x)
        return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


class PyramidTNTBlock(nn.Module):
    """The official ``Block``: with words, an inner transformer on the words of every sentence
    (its LayerNorms normalise the 16 words of a sentence jointly) whose projection
    ``norm2(proj(norm1(words)))`` is added to the sentence; then the outer transformer on the
    sentences with :class:`ReducedAttention` and the stage's position bias.

    Args:
        inner_dims (int): Word channels c.
        embed_dims (int): Sentence channels d.
        inner_num_heads (int): Heads of the inner attention.
        num_heads (int): Heads of the outer attention.
        sr_ratio (int): Pooling of the outer keys and values.
        with_words (bool): Build the inner transformer (the official stages have it in their
            first block only, and in the second of a stage with more than 6 blocks).
        **layer_kwargs: ``mlp_ratio``, ``qkv_bias``, ``drop_rate``, ``attn_drop_rate``,
            ``drop_path_rate``, ``norm_cfg``, ``act_cfg`` of both transformer layers.
    """

    def __init__(self, inner_dims: int, embed_dims: int, inner_num_heads: int, num_heads: int,
                 sr_ratio: int, with_words: bool, **layer_kwargs):
        super().__init__()
        self.inner = self.word_proj = None
        if with_words:
            self.inner = TransformerLayer(inner_dims, inner_num_heads,
                                          norm_shape=(NUM_WORDS, inner_dims), **layer_kwargs)
            self.word_proj = WordsToSentence(inner_dims, embed_dims, layer_kwargs['norm_cfg'])
        attn = ReducedAttention(embed_dims, num_heads, sr_ratio=sr_ratio,
                                qkv_bias=layer_kwargs['qkv_bias'],
                                attn_drop_rate=layer_kwargs['attn_drop_rate'],
                                proj_drop_rate=layer_kwargs['drop_rate'],
                                norm_cfg=layer_kwargs['norm_cfg'])
        self.outer = TransformerLayer(embed_dims, num_heads, attn=attn, **layer_kwargs)

    def forward(self, words: torch.Tensor, sentences: torch.Tensor, grid: Tuple[int, int],
                attn_bias) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.inner is not None:
            words = self.inner(words)
            sentences = sentences + self.word_proj(words, sentences.shape[0])
        return words, self.outer(sentences, grid=grid, attn_bias=attn_bias)


class PyramidTNTStage(BackboneStage):
    """One official ``Stage`` and what feeds it and leaves it: the word and sentence merges from
    the previous stage (stages 2-4), the blocks with their shared learned ``relative_pos`` (a full
    (queries x keys) bias for the pre-training grid, resized to the real grid by
    :func:`resize_attn_bias`), the final norm (stage 4) and the 2x upsampling of the output."""

    def __init__(self, blocks: List[nn.Module], num_heads: int, pos_grid: Tuple[int, int],
                 sr_ratio: int, word_merge: Optional[nn.Module] = None,
                 sentence_merge: Optional[nn.Module] = None, norm: Optional[nn.Module] = None,
                 out_proj: Optional[nn.Module] = None, bias_chunk_size: Optional[int] = None):
        super().__init__()
        self.word_merge, self.sentence_merge = word_merge, sentence_merge
        self.pos_grid, self.sr_ratio = pos_grid, sr_ratio
        self.key_grid = tuple(ceil_div(n, sr_ratio) for n in pos_grid)
        self.relative_pos = nn.Parameter(torch.zeros(1, num_heads, math.prod(pos_grid),
                                                     math.prod(self.key_grid)))
        self.blocks = nn.ModuleList(blocks)
        self.norm, self.out_proj = norm, out_proj
        self.bias_chunk_size = bias_chunk_size

    def attn_bias(self, grid: Tuple[int, int], device: Optional[torch.device] = None):
        """``relative_pos`` for a sentence grid: the tensor, or its rows in chunks; made with the
        queries where the attention weights are recomputed in backward (on ``device``), so that
        the whole bias and its gradient never exist."""
        key_grid = tuple(ceil_div(n, self.sr_ratio) for n in grid)
        chunked = self.bias_chunk_size and grid[0] * grid[1] > self.bias_chunk_size
        recomputed = device is not None and \
            self.blocks[0].outer.attn.recomputes_long_attention(device)
        if not is_exporting() and (chunked or recomputed):
            return AttnBiasRows(self.relative_pos, self.pos_grid, self.key_grid,
                                new_query_grid=grid, new_key_grid=key_grid,
                                max_queries=self.bias_chunk_size or grid[0] * grid[1])
        return resize_attn_bias(self.relative_pos, self.pos_grid, self.key_grid, grid, key_grid)

    def forward(self, words: torch.Tensor, sentences: torch.Tensor, grid: Tuple[int, int]
                ) -> Tuple[torch.Tensor, torch.Tensor, Tuple[int, int]]:
        """-> (words, sentences, grid) for the next stage (``norm`` and ``out_proj`` make the
        output from them: the backbone applies them)."""
        if self.sentence_merge is not None:
            words = self.word_merge(words, grid)  # on the old grid
            sentences, grid = self.sentence_merge(sentences, grid)
        bias = self.attn_bias(grid, sentences.device)
        for block in self.blocks:
            words, sentences = self.run_block(block, words, sentences, grid, bias)
        return words, sentences, grid


class PyramidTNTUpsample(nn.Sequential):
    """The paper's detection set-up: 2x by a stride-2 transposed conv, then a 3x3 conv, each
    followed by a norm and GELU (no bias: the norm has one). The 3x3 conv's input is recomputed
    in backward from the transposed conv's output (:func:`~mmhvit.models.layers.lean.lean_layer`):
    these maps are the largest the backbone keeps outside its (checkpointed) blocks."""

    def __init__(self, channels: int, norm_cfg: dict):
        super().__init__(
            nn.ConvTranspose2d(channels, channels, 2, 2, bias=False),
            build_norm2d(norm_cfg, channels), nn.GELU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            build_norm2d(norm_cfg, channels), nn.GELU())
        self.lean = True  # see mmhvit.models.layers.lean

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up, norm1, act1, conv, norm2, act2 = self
        return act2(norm2(lean_layer([norm1, act1], conv, up(x), self.lean)))
