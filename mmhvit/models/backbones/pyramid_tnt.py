"""PyramidTNT: Transformer in Transformer with a pyramid, as a dense-prediction backbone.

`PyramidTNT: Improved Transformer-in-Transformer Baselines with Pyramid Architecture
<https://arxiv.org/abs/2201.00978>`_ (Han et al., 2022). The layers follow the official code
(``huawei-noah/Efficient-AI-Backbones``, ``tnt_pytorch/pyramid_tnt.py``); its checkpoints are
converted by :mod:`mmhvit.models.converters.ptnt`.
"""
import math
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_backbone
from ..converters.ptnt import NUM_WORDS, convert_ptnt_checkpoint, describe_ptnt_checkpoint
from ..layers import (
    AttnBiasRows,
    BackboneStage,
    ReducedAttention,
    TransformerLayer,
    WordsToSentence,
    build_norm2d,
    ceil_div,
    is_exporting,
    pad_nchw,
    padding_to_multiple,
    resize_attn_bias,
    resize_pos_map,
    trunc_normal_init,
)
from .base_backbone import HViTBackbone

WORDS_PER_SIDE = 4  # a sentence holds 4 x 4 words
SENTENCE_STRIDE = 8  # pixels per sentence side in stage 1 (a word is 2 x 2 pixels)
OUT_TYPES = ('pyramid', 'raw')


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
        attn = ReducedAttention(embed_dims, num_heads, sr_ratio, layer_kwargs['qkv_bias'],
                                layer_kwargs['attn_drop_rate'], layer_kwargs['drop_rate'],
                                layer_kwargs['norm_cfg'])
        self.outer = TransformerLayer(embed_dims, num_heads, attn=attn, **layer_kwargs)

    def forward(self, words: torch.Tensor, sentences: torch.Tensor, grid: Tuple[int, int],
                attn_bias) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.inner is not None:
            words = self.inner(words)
            sentences = sentences + self.word_proj(words, sentences.shape[0])
        return words, self.outer(sentences, grid=grid, attn_bias=attn_bias)


class StageResult(NamedTuple):
    """What a stage returns: words, sentences and their grid for the next stage, and its output
    tokens (the final-normed sentences in stage 4)."""
    words: torch.Tensor
    sentences: torch.Tensor
    grid: Tuple[int, int]
    out: torch.Tensor


class PyramidTNTState(NamedTuple):
    """What PyramidTNT's stages pass on: the last stage's result and the input size (the
    outputs are cropped to it)."""
    words: torch.Tensor
    sentences: torch.Tensor
    grid: Tuple[int, int]
    out: Optional[torch.Tensor]
    size: Tuple[int, int]


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

    def attn_bias(self, grid: Tuple[int, int]):
        """``relative_pos`` for a sentence grid: the tensor, or its rows in chunks."""
        key_grid = tuple(ceil_div(n, self.sr_ratio) for n in grid)
        if self.bias_chunk_size and not is_exporting() and \
                grid[0] * grid[1] > self.bias_chunk_size:
            return AttnBiasRows(self.relative_pos, self.pos_grid, self.key_grid, grid, key_grid,
                                self.bias_chunk_size)
        return resize_attn_bias(self.relative_pos, self.pos_grid, self.key_grid, grid, key_grid)

    def forward(self, words: torch.Tensor, sentences: torch.Tensor,
                grid: Tuple[int, int]) -> 'StageResult':
        """-> (words, sentences, grid) for the next stage, and this stage's output tokens."""
        if self.sentence_merge is not None:
            words = self.word_merge(words, grid)  # on the old grid
            sentences, grid = self.sentence_merge(sentences, grid)
        bias = self.attn_bias(grid)
        for block in self.blocks:
            words, sentences = self.run_block(block, words, sentences, grid, bias)
        out = sentences if self.norm is None else self.norm(sentences)
        return StageResult(words, sentences, grid, out)


def build_upsample(channels: int, norm_cfg: dict) -> nn.Module:
    """The paper's detection set-up: 2x by a stride-2 transposed conv, then a 3x3 conv, each
    followed by a norm and GELU (no bias: the norm has one)."""
    return nn.Sequential(
        nn.ConvTranspose2d(channels, channels, 2, 2, bias=False), build_norm2d(norm_cfg, channels),
        nn.GELU(), nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        build_norm2d(norm_cfg, channels), nn.GELU())


@register_backbone(plain_name=True)
class PyramidTNT(HViTBackbone):
    """PyramidTNT backbone: `PyramidTNT <https://arxiv.org/abs/2201.00978>`_ (Han et al., 2022).

    A conv stem makes sentences at stride 8, each of 4 x 4 words at stride 2; four stages (the
    sentences at strides 8, 16, 32, 64) of TNT blocks, whose outer attention takes keys pooled by
    4, 2, 1, 1 and adds a learned bias per stage; between stages, strided convs merge 2 x 2
    sentences and their words. With the official weights at the pre-training size (and
    ``out_type='raw'``, ``out_indices=(3, )``), mean-pooling the last map gives the official
    features. No class token.

    Dense outputs follow the paper's detection set-up: each stage's map is upsampled 2x (a 2x2
    stride-2 transposed conv and a 3x3 conv, each with ``conv_norm_cfg`` and GELU, channels kept),
    giving strides 4, 8, 16, 32; the stage-4 map is the final-normed one (``final_norm``).

    Any input of at least 1 x 1 works. It is zero-padded to a multiple of 8 (the stem's), so the
    first grid has ceil(H / 8) x ceil(W / 8) sentences, each holding real pixels, and each merge
    gives ceil(n / 2) (an odd grid gets the official zero sentences inside the word merge only).
    Keys pooled from a partial border cell average the sentences that exist: no token is padding,
    and none needs a mask. Output i has ceil(H / s_i) x ceil(W / s_i) pixels (the upsampled row
    that lies in the padding is cropped). The sentence position embedding is resized (bicubic)
    to the real grid, and each stage's ``relative_pos`` too, read as a 4-D map (query row, query
    column, key row, key column) and resized bicubically along each axis
    (:func:`resize_attn_bias`): exact at the pre-training size, smooth elsewhere. Checkpoints of
    another pre-training size are resized the same way on load.

    Archs (official; params with a 1000-class head, GMACs at the pre-training size, ImageNet-1k
    top-1 from the paper):

    ======  ==================  ===========  ========  ======  ======  =====  =====
    arch    embed_dims          inner_dims   depths    size    params  GMACs  top-1
    ======  ==================  ===========  ========  ======  ======  =====  =====
    tiny    80, 160, 320, 320   5 .. 20      2-6-3-2   192     10.6M   0.6    75.2
    small   128, 256, 512, 512  8 .. 32      2-8-4-2   256     32.0M   3.3    82.0
    medium  192, 384, 768, 768  12 .. 48     2-8-6-2   256     85.0M   8.2    83.5
    base    256, 512, 1024 x2   16 .. 64     2-10-6-2  256     157.0M  16.0   84.1
    ======  ==================  ===========  ========  ======  ======  =====  =====

    Args:
        arch (str | dict): A name of ``arch_zoo`` (``tiny``/``ti``, ``small``/``s``,
            ``medium``/``m``, ``base``/``b``) or a dict with 4 values per stage of
            ``embed_dims`` (d), ``inner_dims`` (c), ``depths`` (>= 1), ``num_heads``,
            ``inner_num_heads`` and optionally ``sr_ratios`` ([4, 2, 1, 1]), ``mlp_ratio`` (4),
            ``qkv_bias`` (False). Default: 'small'.
        pretrain_img_size (int | tuple, optional): The image size ``pos_embed`` and
            ``relative_pos`` are stored for; None: the arch's (192 for tiny, else 256).
        out_type (str): ``'pyramid'``: maps at strides 4, 8, 16, 32; ``'raw'``: the stage maps
            themselves (strides 8, 16, 32, 64; the ImageNet classifier's features with
            ``out_indices=(3, )``). Default: 'pyramid'.
        final_norm (bool): Apply the official final norm to the stage-4 map. Default: True.
        conv_norm_cfg (dict): Norm of the stem's and the upsampling's convs. Default: BN.
        bias_chunk_size (int, optional): Attend at most this many queries at a time (whole grid
            rows), resizing ``relative_pos`` row by row, so that the (queries x keys) bias never
            exists whole (see docs/benchmarks.md for its memory at detection sizes); the same
            numbers up to rounding. Ignored while exporting. None: the whole bias at once.
        **kwargs: The arguments every backbone takes (:class:`HViTBackbone`): ``in_channels``,
            ``out_indices``, ``drop_rate``, ``attn_drop_rate``, ``drop_path_rate``, ``qkv_bias``,
            ``norm_cfg`` (default LN), ``act_cfg`` (default GELU), ``frozen_stages`` (0 the
            stem and position embeddings, k also stages 1..k), ``norm_eval`` (the BNs of the
            stem and the upsampling), ``with_cp``, ``pretrained``, ``init_cfg`` (official
            checkpoints are converted on load).
    """

    arch_zoo = {
        **dict.fromkeys(['ti', 'tiny'], dict(
            embed_dims=[80, 160, 320, 320], inner_dims=[5, 10, 20, 20], depths=[2, 6, 3, 2],
            num_heads=[2, 4, 8, 8], inner_num_heads=[1, 2, 4, 4])),
        **dict.fromkeys(['s', 'small'], dict(
            embed_dims=[128, 256, 512, 512], inner_dims=[8, 16, 32, 32], depths=[2, 8, 4, 2],
            num_heads=[4, 8, 16, 16], inner_num_heads=[2, 4, 8, 8])),
        **dict.fromkeys(['m', 'medium'], dict(
            embed_dims=[192, 384, 768, 768], inner_dims=[12, 24, 48, 48], depths=[2, 8, 6, 2],
            num_heads=[4, 8, 16, 16], inner_num_heads=[2, 4, 8, 8])),
        **dict.fromkeys(['b', 'base'], dict(
            embed_dims=[256, 512, 1024, 1024], inner_dims=[16, 32, 64, 64],
            depths=[2, 10, 6, 2], num_heads=[4, 8, 16, 16], inner_num_heads=[2, 4, 8, 8])),
    }
    essential_keys = ('embed_dims', 'inner_dims', 'depths', 'num_heads', 'inner_num_heads')
    optional_keys = dict(sr_ratios=[4, 2, 1, 1], mlp_ratio=4., qkv_bias=False)
    default_norm_cfg = dict(type='LN')
    default_act_cfg = dict(type='GELU')
    pretrain_img_sizes = dict(tiny=192)  # the official models' sizes; 256 for the others

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 pretrain_img_size: Union[int, Sequence[int], None] = None,
                 out_type: str = 'pyramid',
                 final_norm: bool = True,
                 conv_norm_cfg: dict = dict(type='BN'),
                 bias_chunk_size: Optional[int] = None,
                 **kwargs):
        if out_type not in OUT_TYPES:
            raise ValueError(f'PyramidTNT: out_type must be one of {OUT_TYPES}, got {out_type!r}')
        if not isinstance(final_norm, bool):
            raise TypeError(f'PyramidTNT: final_norm must be a bool, got {final_norm!r}')
        if bias_chunk_size is not None and not (isinstance(bias_chunk_size, int)
                                                and bias_chunk_size > 0):
            raise ValueError(f'PyramidTNT: bias_chunk_size must be a positive int or None, got '
                             f'{bias_chunk_size!r}')
        if isinstance(pretrain_img_size, int):
            pretrain_img_size = (pretrain_img_size, pretrain_img_size)
        if pretrain_img_size is not None and (
                len(pretrain_img_size) != 2 or min(pretrain_img_size) < 1):
            raise ValueError(f'PyramidTNT: pretrain_img_size must be a positive int or (h, w), '
                             f'got {pretrain_img_size}')
        self.out_type, self.final_norm, self.bias_chunk_size = out_type, final_norm, bias_chunk_size
        self.conv_norm_cfg = conv_norm_cfg
        self._pretrain_img_size = pretrain_img_size
        super().__init__(arch, **kwargs)

    # --- construction -------------------------------------------------------------------------
    def canonical_arch_name(self, name: str) -> str:
        return {'ti': 'tiny', 's': 'small', 'm': 'medium', 'b': 'base'}.get(name, name)

    def check_arch(self, settings: dict) -> dict:
        for key in (*self.essential_keys, 'sr_ratios'):
            values = settings[key]
            if not isinstance(values, (list, tuple)) or len(values) != self.num_stages or any(
                    not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f'PyramidTNT: arch {key} needs {self.num_stages} positive ints '
                                 f'(one per stage), got {values!r}')
        for dims, heads in (('embed_dims', 'num_heads'), ('inner_dims', 'inner_num_heads')):
            if any(d % h for d, h in zip(settings[dims], settings[heads])):
                raise ValueError(f'PyramidTNT: {dims} {settings[dims]} are not divisible by '
                                 f'{heads} {settings[heads]}')
        return settings

    def _build_layers(self) -> None:
        s = self.arch_settings
        self.stage_channels = tuple(s['embed_dims'])
        size = self._pretrain_img_size or (self.pretrain_img_sizes.get(self.arch_name, 256), ) * 2
        grid = tuple(ceil_div(n, SENTENCE_STRIDE) for n in size)
        self.pos_grid = grid
        self.patch_embed = PyramidTNTStem(self.in_channels, s['inner_dims'][0],
                                          s['embed_dims'][0], grid, self.conv_norm_cfg,
                                          self.drop_rate)
        for i, rates in enumerate(self.drop_path_schedule(s['depths'])[:self.num_built_stages]):
            grid = tuple(ceil_div(n, 2) for n in grid) if i else grid
            self.stages.append(self._build_stage(i, rates, grid))

    def _build_stage(self, i: int, rates: List[float], grid: Tuple[int, int]) -> nn.Module:
        s = self.arch_settings
        dims, inner = s['embed_dims'], s['inner_dims']
        layer_kwargs = dict(mlp_ratio=s['mlp_ratio'], qkv_bias=self.qkv_bias,
                            drop_rate=self.drop_rate, attn_drop_rate=self.attn_drop_rate,
                            norm_cfg=self.norm_cfg, act_cfg=self.act_cfg)
        blocks = [
            PyramidTNTBlock(inner[i], dims[i], s['inner_num_heads'][i], s['num_heads'][i],
                            s['sr_ratios'][i], with_words=j == 0 or (j == 1 and len(rates) > 6),
                            drop_path_rate=rate, **layer_kwargs) for j, rate in enumerate(rates)
        ]
        merges = {}
        if i:
            merges = dict(word_merge=WordMerge(inner[i - 1], inner[i], self.norm_cfg),
                          sentence_merge=SentenceMerge(dims[i - 1], dims[i], self.norm_cfg))
        last = i == self.num_stages - 1
        norm = build_norm_layer(self.norm_cfg, dims[i])[1] if self.final_norm and last else None
        # Outputs that are not requested get nothing: no parameter without gradient.
        out_proj = build_upsample(dims[i], self.conv_norm_cfg) if (
            self.out_type == 'pyramid' and i in self.out_indices) else None
        return PyramidTNTStage(blocks, s['num_heads'][i], grid, s['sr_ratios'][i], norm=norm,
                               out_proj=out_proj, bias_chunk_size=self.bias_chunk_size, **merges)

    def init_default_weights(self) -> None:
        """The official initialisation: truncated normal (std .02) for the position embeddings
        and linears, normal(0, sqrt(2 / fan_out)) for convs, N(0, 1) for ``relative_pos``."""
        trunc_normal_init(self, layer_types=(nn.Linear, ))
        trunc_normal_(self.patch_embed.pos_embed, std=.02)
        trunc_normal_(self.patch_embed.word_pos_embed, std=.02)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
                fan_out = math.prod(module.kernel_size) * module.out_channels // module.groups
                nn.init.normal_(module.weight, 0, math.sqrt(2. / fan_out))
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for stage in self.stages:
            nn.init.normal_(stage.relative_pos)

    # --- forward ------------------------------------------------------------------------------
    def forward_stem(self, x: torch.Tensor) -> PyramidTNTState:
        height, width = x.shape[-2:]
        x = pad_nchw(x, *padding_to_multiple(height, width, SENTENCE_STRIDE))
        words, sentences, grid = self.patch_embed(x)
        return PyramidTNTState(words, sentences, grid, None, (height, width))

    def forward_stage(self, stage: PyramidTNTStage, state: PyramidTNTState) -> PyramidTNTState:
        return state._replace(**stage(state.words, state.sentences, state.grid)._asdict())

    def stage_output(self, index: int, state: PyramidTNTState) -> torch.Tensor:
        out, grid = state.out, state.grid
        fmap = out.transpose(1, 2).reshape(out.shape[0], -1, *grid)
        stage = self.stages[index]
        if stage.out_proj is None:
            return fmap
        stride = SENTENCE_STRIDE * 2**index // 2
        # 2 ceil(n / 2s) can exceed ceil(n / s) by one row in the padding: crop it.
        height, width = state.size
        return stage.out_proj(fmap)[..., :ceil_div(height, stride), :ceil_div(width, stride)]

    # --- checkpoints --------------------------------------------------------------------------
    def pos_embed_keys(self) -> Tuple[str, ...]:
        return ('patch_embed.pos_embed',
                *(f'stages.{i}.relative_pos' for i in range(len(self.stages))))

    def resize_pos_embed(self, key: str, value: torch.Tensor) -> Optional[torch.Tensor]:
        """A checkpoint's square-grid ``pos_embed`` or ``relative_pos``, resized to this
        model's grids (bicubic, :func:`resize_attn_bias` for the bias)."""
        if key == 'patch_embed.pos_embed':
            if value.dim() != 3 or value.shape[-1] != self.patch_embed.pos_embed.shape[-1]:
                return None
            side = _square_side(key, value)
            grid = value.reshape(1, side, side, -1).permute(0, 3, 1, 2).float()
            return resize_pos_map(grid, self.pos_grid).flatten(2).transpose(1, 2).to(value.dtype)
        stage = self.stages[int(key.split('.')[1])]
        if value.dim() != 4 or value.shape[1] != stage.relative_pos.shape[1]:
            return None
        queries, keys = (_square_side(key, value, dim) for dim in (2, 3))
        resized = resize_attn_bias(value.float(), (queries, queries), (keys, keys),
                                   stage.pos_grid, stage.key_grid)
        return resized.contiguous().to(value.dtype)

    def convert_checkpoint(self, state_dict: dict) -> dict:
        return convert_ptnt_checkpoint(state_dict)

    def describe_checkpoint(self, state_dict: dict) -> str:
        return describe_ptnt_checkpoint(state_dict, type(self))


def _square_side(key: str, value: torch.Tensor, dim: int = 1) -> int:
    side = math.isqrt(value.shape[dim])
    if side * side != value.shape[dim]:
        raise ValueError(f'PyramidTNT: cannot resize {key} of shape {tuple(value.shape)}: its '
                         f'{value.shape[dim]} positions along dim {dim} do not form a square grid')
    return side
