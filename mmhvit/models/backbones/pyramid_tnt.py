"""PyramidTNT: Transformer in Transformer with a pyramid, as a dense-prediction backbone.

`PyramidTNT: Improved Transformer-in-Transformer Baselines with Pyramid Architecture
<https://arxiv.org/abs/2201.00978>`_ (Han et al., 2022). The layers follow the official code
(``huawei-noah/Efficient-AI-Backbones``, ``tnt_pytorch/pyramid_tnt.py``); its checkpoints are
converted by :mod:`mmhvit.models.converters.ptnt`.
"""
import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_backbone
from ..converters.ptnt import convert_ptnt_checkpoint, describe_ptnt_checkpoint
from ..layers import (
    PyramidTNTBlock,
    PyramidTNTStage,
    PyramidTNTStem,
    PyramidTNTUpsample,
    SentenceMerge,
    WordMerge,
    ceil_div,
    pad_nchw,
    padding_to_multiple,
    resize_attn_bias,
    resize_pos_map,
    trunc_normal_init,
)
from .base_backbone import HViTBackbone, image_size_pair

SENTENCE_STRIDE = 8  # pixels per sentence side in stage 1 (a word is 2 x 2 pixels)
OUT_TYPES = ('pyramid', 'raw')


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

    Any input of at least 1 x 1 works: it is zero-padded to a multiple of 8, each merge gives
    ceil(n / 2) sentences, keys pooled from a partial border cell average the sentences that
    exist (no token is padding), and output i has ceil(H / s_i) x ceil(W / s_i) pixels. The
    position embedding and each stage's ``relative_pos`` (read as a 4-D query x key map,
    :func:`resize_attn_bias`) are resized bicubically to the real grid: exact at the pre-training
    size, smooth elsewhere; checkpoints of another pre-training size are resized on load.

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
        **kwargs: The arguments every backbone takes (:class:`HViTBackbone`); ``norm_eval`` acts
            on the BNs of the stem and the upsampling, ``init_cfg`` converts official checkpoints.
    """

    arch_zoo = {
        'tiny': dict(embed_dims=[80, 160, 320, 320], inner_dims=[5, 10, 20, 20],
                     depths=[2, 6, 3, 2], num_heads=[2, 4, 8, 8], inner_num_heads=[1, 2, 4, 4]),
        'small': dict(embed_dims=[128, 256, 512, 512], inner_dims=[8, 16, 32, 32],
                      depths=[2, 8, 4, 2], num_heads=[4, 8, 16, 16],
                      inner_num_heads=[2, 4, 8, 8]),
        'medium': dict(embed_dims=[192, 384, 768, 768], inner_dims=[12, 24, 48, 48],
                       depths=[2, 8, 6, 2], num_heads=[4, 8, 16, 16],
                       inner_num_heads=[2, 4, 8, 8]),
        'base': dict(embed_dims=[256, 512, 1024, 1024], inner_dims=[16, 32, 64, 64],
                     depths=[2, 10, 6, 2], num_heads=[4, 8, 16, 16],
                     inner_num_heads=[2, 4, 8, 8]),
    }
    arch_aliases = {'ti': 'tiny', 's': 'small', 'm': 'medium', 'b': 'base'}
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
        if pretrain_img_size is not None:
            pretrain_img_size = image_size_pair('PyramidTNT', pretrain_img_size)
        self.out_type, self.final_norm, self.bias_chunk_size = out_type, final_norm, bias_chunk_size
        self.conv_norm_cfg = conv_norm_cfg
        self._pretrain_img_size = pretrain_img_size
        super().__init__(arch, **kwargs)

    # --- construction -------------------------------------------------------------------------
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
                                          s['embed_dims'][0], pos_grid=grid,
                                          norm_cfg=self.conv_norm_cfg, drop_rate=self.drop_rate)
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
            PyramidTNTBlock(inner[i], dims[i], inner_num_heads=s['inner_num_heads'][i],
                            num_heads=s['num_heads'][i], sr_ratio=s['sr_ratios'][i],
                            with_words=j == 0 or (j == 1 and len(rates) > 6),
                            drop_path_rate=rate, **layer_kwargs) for j, rate in enumerate(rates)
        ]
        merges = {}
        if i:
            merges = dict(word_merge=WordMerge(inner[i - 1], inner[i], self.norm_cfg),
                          sentence_merge=SentenceMerge(dims[i - 1], dims[i], self.norm_cfg))
        last = i == self.num_stages - 1
        norm = build_norm_layer(self.norm_cfg, dims[i])[1] if self.final_norm and last else None
        # Outputs that are not requested get nothing: no parameter without gradient.
        out_proj = PyramidTNTUpsample(dims[i], self.conv_norm_cfg) if (
            self.out_type == 'pyramid' and i in self.out_indices) else None
        return PyramidTNTStage(blocks, s['num_heads'][i], pos_grid=grid,
                               sr_ratio=s['sr_ratios'][i], norm=norm, out_proj=out_proj,
                               bias_chunk_size=self.bias_chunk_size, **merges)

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
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input(x)
        size = tuple(x.shape[-2:])
        x = pad_nchw(x, *padding_to_multiple(*size, SENTENCE_STRIDE))
        words, sentences, grid = self.patch_embed(x)
        outs = []
        for index, stage in enumerate(self.stages):
            words, sentences, grid = stage(words, sentences, grid)
            if index in self.out_indices:
                outs.append(self.output(index, sentences, grid, size))
        return self.nchw_outputs(outs)

    def output(self, index: int, sentences: torch.Tensor, grid: Tuple[int, int],
               size: Tuple[int, int]) -> torch.Tensor:
        """Output ``index`` from the sentences after its stage: the stage's map (final-normed in
        stage 4), upsampled 2x for ``out_type='pyramid'`` and cropped to ``size``'s stride."""
        stage = self.stages[index]
        if stage.norm is not None:
            sentences = stage.norm(sentences)
        fmap = sentences.transpose(1, 2).reshape(sentences.shape[0], -1, *grid)
        if stage.out_proj is None:
            return fmap
        stride = SENTENCE_STRIDE * 2**index // 2
        # 2 ceil(n / 2s) can exceed ceil(n / s) by one row in the padding: crop it.
        return stage.out_proj(fmap)[..., :ceil_div(size[0], stride), :ceil_div(size[1], stride)]

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
