"""NesT: Nested Hierarchical Transformer as a dense-prediction backbone.

`Nested Hierarchical Transformer: Towards Accurate, Data-Efficient and Interpretable Visual
Understanding <https://arxiv.org/abs/2105.12723>`_ (Zhang et al., AAAI 2022). Official code:
``google-research/nested-transformer`` (JAX); timm's ``nest_*_jx`` models carry its weights.
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
from mmengine.logging import print_log
from mmengine.model.weight_init import trunc_normal_

from mmhvit.registry import register_backbone
from ..layers import (LayerNorm2d, Mlp, multihead_attention, pad_nchw, pad_nhwc,
                      padding_to_multiple, resize_pos_map, window_key_mask, window_partition,
                      window_reverse)
from .base_backbone import HViTBackbone

POOL_PADDINGS = ('same', 'symmetric')


class NesTAttention(nn.Module):
    """Multi-head self-attention inside each block; blocks are a batch axis (one SDPA call)."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.,
                 proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'NesT: dim {dim} is not divisible by num_heads {num_heads}')
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # [q|k|v], each head-major, as timm / official
        x = multihead_attention(q, k, v, self.num_heads, key_mask=key_mask,
                                dropout_p=self.attn_drop if self.training else 0.)
        return self.proj_drop(self.proj(x))


class NesTLayer(nn.Module):
    """Pre-LN transformer layer (LN eps 1e-6, GELU MLP), shared by all blocks of a level."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4., qkv_bias: bool = True,
                 drop_rate: float = 0., attn_drop_rate: float = 0., drop_path: float = 0.):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = NesTAttention(dim, num_heads, qkv_bias, attn_drop_rate, drop_rate)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop=drop_rate)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), key_mask))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class NesTPatchEmbed(nn.Module):
    """Non-overlapping ``patch_size`` conv; the image is zero-padded to whole patches first."""

    def __init__(self, in_channels: int, embed_dim: int, patch_size: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, embed_dim, patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad_h, pad_w = padding_to_multiple(x.shape[-2], x.shape[-1], self.patch_size)
        return self.proj(pad_nchw(x, pad_h, pad_w))


class BlockAggregation(nn.Module):
    """conv3x3 -> LayerNorm over channels -> max-pool 3x3 stride 2: NCHW (H, W) -> ceil(H/2, W/2).

    ``padding='same'`` reproduces TF "SAME" pooling (for an even side: nothing before, one after),
    which the official weights were trained with; ``'symmetric'`` pads one on each side (timm's
    non-jx models). Both give ceil(n / 2) outputs for any side n, odd or even.
    """

    def __init__(self, in_channels: int, out_channels: int, padding: str = 'same'):
        super().__init__()
        self.padding = padding
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = LayerNorm2d(out_channels, eps=1e-6)

    @staticmethod
    def _same_pad(size: int) -> Tuple[int, int]:
        total = max((math.ceil(size / 2) - 1) * 2 + 3 - size, 0)
        return total // 2, total - total // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.conv(x))
        if self.padding == 'symmetric':
            return F.max_pool2d(x, 3, 2, padding=1)
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


class NesTLevel(nn.Module):
    """One level: (block aggregation), position embedding, transformer layers over blocks.

    Works on the valid (unpadded) NCHW token map. For the layers the map is zero-padded at the
    bottom/right to whole blocks, the blocks become a batch axis, and padded tokens are masked out
    as keys, so valid outputs never depend on the padding; the padded rows/cols are dropped again.

    Args:
        dim (int): Channels of this level.
        depth (int): Transformer layers.
        num_heads (int): Attention heads.
        block_size (int): Block side in tokens.
        pos_layout (tuple, optional): (rows, cols, bh, bw) of the position embedding at the
            pre-training size; None: no position embedding.
        in_dim (int, optional): Channels of the previous level; None: no aggregation (level 0).
        drop_paths (Sequence[float]): Drop-path rate per layer.
    """

    def __init__(self, dim: int, depth: int, num_heads: int, block_size: int,
                 pos_layout: Optional[Tuple[int, int, int, int]], in_dim: Optional[int] = None,
                 mlp_ratio: float = 4., qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_paths: Sequence[float] = (),
                 pool_padding: str = 'same', with_cp: bool = False):
        super().__init__()
        self.block_size = block_size
        self.with_cp = with_cp
        self.pos_layout = pos_layout
        if in_dim is not None:
            self.pool = BlockAggregation(in_dim, dim, pool_padding)
        if pos_layout is not None:
            rows, cols, bh, bw = pos_layout
            self.pos_embed = nn.Parameter(torch.zeros(1, rows * cols, bh * bw, dim))
        self.layers = nn.ModuleList([
            NesTLayer(dim, num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate, drop_paths[i])
            for i in range(depth)
        ])

    def pos_map(self, size: Tuple[int, int]) -> torch.Tensor:
        """The position embedding as one (1, H, W, C) map over the level's real token grid."""
        pos = resize_pos_map(blocks_to_map(self.pos_embed, self.pos_layout), size)
        return pos.permute(0, 2, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, 'pool'):
            x = self.pool(x)
        if self.pos_layout is None and not len(self.layers):
            return x
        height, width = x.shape[-2:]
        x = x.permute(0, 2, 3, 1)
        if self.pos_layout is not None:
            x = x + self.pos_map((height, width))
        if len(self.layers):
            # A side shorter than a block gets one block of that side: same result as padding it to
            # a whole block with masked keys, without the wasted tokens.
            bh, bw = min(self.block_size, height), min(self.block_size, width)
            pad_h, pad_w = padding_to_multiple(height, width, bh, bw)
            key_mask = window_key_mask(height, width, pad_h, pad_w, bh, bw, x.device)
            tokens = window_partition(pad_nhwc(x, pad_h, pad_w), bh, bw)
            for layer in self.layers:
                if self.with_cp and tokens.requires_grad:
                    tokens = cp.checkpoint(layer, tokens, key_mask, use_reentrant=False)
                else:
                    tokens = layer(tokens, key_mask)
            x = window_reverse(tokens, bh, bw, height + pad_h, width + pad_w)[:, :height, :width]
        return x.permute(0, 3, 1, 2).contiguous()


@register_backbone(plain_name=True)
class NesT(HViTBackbone):
    """NesT backbone with outputs at strides 4, 8, 16 and 32, for any input size.

    A 4x4 patch embedding, then three levels of non-overlapping blocks of ``block_size`` x
    ``block_size`` tokens (14 x 14 on ImageNet: 4x4, 2x2, 1x1 blocks at 224). Each level adds its
    learned position embedding (1, T blocks, N tokens, C) and runs pre-LN transformer layers whose
    weights are shared by all blocks; a block aggregation (conv3x3 -> LN -> max-pool 3x3 s2)
    doubles the channels and halves the grid between levels. At 224 x 224 the levels are exactly
    the official model's.

    Other input sizes (H, W >= 32, square or not): the image is padded to whole patches, so level i
    has ceil(H / s) x ceil(W / s) tokens (s = 4, 8, 16). Each level is cut into ceil(h / 14) x
    ceil(w / 14) blocks anchored at the top-left: the official rule (14-token blocks, the number of
    blocks grows with the image), which keeps every level-(i+1) block the parent of 2 x 2
    level-i blocks (a level smaller than a block is one block of its own size). Padded tokens are
    masked out of attention, and the aggregation sees only the valid map, so outputs are as if the
    image had exactly that size. A level's position embedding is read as one map over all its
    blocks, resized (bicubic) to the level's real (unpadded) token grid and re-blocked;
    checkpoints made at another pre-training size are resized on load.

    The stride-32 output (index 3) is new, built the NesT way: one more block aggregation doubling
    the channels, then ``extra_depth`` transformer layers over 14 x 14 blocks (with their own
    position embedding when ``extra_depth > 0``). Its parameters are not in the pretrained
    weights. Only the levels up to the deepest requested output are built, so no parameter is
    left unused (``out_indices=(2,)`` gives exactly the ImageNet model).

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'base'`` or a dict with ``embed_dims``,
            ``depths``, ``num_heads`` (3 levels each) and optionally ``block_size`` (14),
            ``patch_size`` (4), ``mlp_ratio`` (4), ``drop_path_rate`` (0.1).
        pretrain_img_size (int | tuple): Image size the position embeddings are laid out for; the
            top level must be whole blocks there (224 for the ImageNet archs).
        in_channels (int): Image channels.
        out_indices (Sequence[int]): Outputs to return, from 0..3 (strides 4, 8, 16, 32).
        final_norm (bool): Apply the pretrained final LayerNorm (``norm``, the one before timm's
            head) to the stride-16 output. Needed for the ImageNet classifier. Default True.
        pool_padding (str): ``'same'`` (TF SAME max-pool, official / ``nest_*_jx`` weights) or
            ``'symmetric'`` (timm's non-jx ``nest_*``).
        extra_depth (int): Transformer layers after the stride-32 aggregation. Default 0.
        extra_num_heads (int, optional): Their heads; default twice the last level's.
        qkv_bias (bool): Bias of the qkv projection. Default True.
        drop_rate (float): Dropout after the attention projection and in the MLP.
        attn_drop_rate (float): Attention dropout.
        drop_path_rate (float, optional): Stochastic depth, linear over all layers (extra layers
            included); None takes the arch's value.
        frozen_stages (int): -1 none; 0 the patch embedding; i: it and the first i levels (the
            third with the final norm; the fourth is the stride-32 one).
        norm_eval (bool): Keep BN layers in eval mode (NesT has none: LayerNorm only).
        with_cp (bool): Gradient checkpointing of each transformer layer.
        pretrained (str, optional): Deprecated; use ``init_cfg``.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)`` loads our, timm's
            or mmpretrain-classifier (with ``prefix='backbone.'``) checkpoints.
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], {
            'embed_dims': [96, 192, 384],
            'depths': [2, 2, 8],
            'num_heads': [3, 6, 12],
            'drop_path_rate': 0.2
        }),
        **dict.fromkeys(['s', 'small'], {
            'embed_dims': [96, 192, 384],
            'depths': [2, 2, 20],
            'num_heads': [3, 6, 12],
            'drop_path_rate': 0.3
        }),
        **dict.fromkeys(['b', 'base'], {
            'embed_dims': [128, 256, 512],
            'depths': [2, 2, 20],
            'num_heads': [4, 8, 16],
            'drop_path_rate': 0.5
        }),
    }
    essential_keys = ('embed_dims', 'depths', 'num_heads')
    optional_keys = dict(block_size=14, patch_size=4, mlp_ratio=4., drop_path_rate=0.1)
    num_levels = 3

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 pretrain_img_size: Union[int, Sequence[int]] = 224,
                 in_channels: int = 3,
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 final_norm: bool = True,
                 pool_padding: str = 'same',
                 extra_depth: int = 0,
                 extra_num_heads: Optional[int] = None,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: Optional[float] = None,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 pretrained: Optional[str] = None,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        super().__init__(in_channels, out_indices, frozen_stages, norm_eval, with_cp, pretrained,
                         init_cfg)
        arch_cfg = self._parse_arch(arch)
        if pool_padding not in POOL_PADDINGS:
            raise ValueError(f'NesT: pool_padding must be one of {POOL_PADDINGS}, got '
                             f'{pool_padding!r}')
        if extra_depth < 0:
            raise ValueError(f'NesT: extra_depth must be >= 0, got {extra_depth}')
        dims = list(arch_cfg['embed_dims'])
        depths = list(arch_cfg['depths'])
        heads = list(arch_cfg['num_heads'])
        self.embed_dims = dims + [dims[-1] * 2]
        self.num_heads = heads
        self.block_size = block_size = int(arch_cfg['block_size'])
        self.patch_size = patch_size = int(arch_cfg['patch_size'])
        self.final_norm = final_norm
        self.pool_padding = pool_padding
        self.num_built = max(self.out_indices) + 1  # levels actually built (incl. the extra one)
        if drop_path_rate is None:
            drop_path_rate = arch_cfg['drop_path_rate']

        # Position embeddings are laid out for the pre-training size, where every one of the three
        # levels must be whole blocks (as in the official model).
        if isinstance(pretrain_img_size, int):
            pretrain_img_size = (pretrain_img_size, pretrain_img_size)
        self.pretrain_img_size = tuple(pretrain_img_size)
        unit = patch_size * block_size * 2**(self.num_levels - 1)
        if len(self.pretrain_img_size) != 2 or any(s <= 0 or s % unit for s in pretrain_img_size):
            raise ValueError(f'NesT: pretrain_img_size must be (a pair of) multiples of {unit} '
                             f'(patch {patch_size} x block {block_size} x '
                             f'2^{self.num_levels - 1}), '
                             f'got {pretrain_img_size}')
        layouts = []
        for i in range(self.num_levels):
            grid_h, grid_w = (s // (patch_size * 2**i) for s in self.pretrain_img_size)
            layouts.append((grid_h // block_size, grid_w // block_size, block_size, block_size))
        # The extra level's embedding is one map over its whole pre-training grid.
        extra_grid = [math.ceil(s / (patch_size * 2**self.num_levels)) for s in pretrain_img_size]
        layouts.append((1, 1, extra_grid[0], extra_grid[1]) if extra_depth > 0 else None)

        all_depths = depths + [extra_depth]
        all_heads = heads + [extra_num_heads or heads[-1] * 2]
        total = sum(all_depths)
        rates = [drop_path_rate * i / max(total - 1, 1) for i in range(total)]  # linear

        self.patch_embed = NesTPatchEmbed(in_channels, dims[0], patch_size)
        self.levels = nn.ModuleList()
        for i in range(self.num_built):
            start = sum(all_depths[:i])
            self.levels.append(
                NesTLevel(
                    self.embed_dims[i],
                    all_depths[i],
                    all_heads[i],
                    block_size,
                    layouts[i],
                    in_dim=self.embed_dims[i - 1] if i else None,
                    mlp_ratio=arch_cfg['mlp_ratio'],
                    qkv_bias=qkv_bias,
                    drop_rate=drop_rate,
                    attn_drop_rate=attn_drop_rate,
                    drop_paths=rates[start:start + all_depths[i]],
                    pool_padding=pool_padding,
                    with_cp=with_cp))
        if final_norm and 2 in self.out_indices:
            self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self._init_nest_weights()
        self._register_load_state_dict_pre_hook(self._resize_pos_embed_hook)
        self._freeze_stages()

    # --- construction helpers -----------------------------------------------------------------
    def _parse_arch(self, arch: Union[str, dict]) -> dict:
        cfg = self.parse_arch(arch)
        if isinstance(arch, str):
            key = arch.lower()
            self.arch_name = {'t': 'tiny', 's': 'small', 'b': 'base'}.get(key, key)
        else:
            self.arch_name = f'custom(dims={list(cfg["embed_dims"])}, depths={list(cfg["depths"])})'
        for key in self.essential_keys:
            if len(cfg[key]) != self.num_levels:
                raise ValueError(f'NesT: arch {key} needs {self.num_levels} values (one per '
                                 f'level), got {cfg[key]}')
        return cfg

    def _init_nest_weights(self) -> None:
        """Official init: trunc-normal(0.02) for dense/conv kernels and embeddings, zero bias."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                trunc_normal_(module.weight, std=.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for level in self.levels:
            if level.pos_layout is not None:
                trunc_normal_(level.pos_embed, std=.02)

    # --- HViTBackbone interface ---------------------------------------------------------------
    def stage_modules(self, index: int) -> List[nn.Module]:
        if index == 0:
            return [self.patch_embed]
        if index > len(self.levels):
            return []
        modules = [self.levels[index - 1]]
        if index == 3 and hasattr(self, 'norm'):
            modules.append(self.norm)
        return modules

    def is_resizable_key(self, key: str) -> bool:
        return re.fullmatch(r'levels\.\d+\.pos_embed', key) is not None

    def convert_checkpoint(self, state_dict: dict) -> dict:
        return convert_nest_checkpoint(state_dict, num_heads=self.num_heads)

    def describe_checkpoint(self, state_dict: dict) -> str:
        return describe_nest_checkpoint(state_dict)

    def _resize_pos_embed_hook(self, state_dict, prefix, *args, **kwargs) -> None:
        """Resize position embeddings made for another pre-training size (square checkpoints)."""
        for i, level in enumerate(self.levels):
            key = f'{prefix}levels.{i}.pos_embed'
            if key not in state_dict or level.pos_layout is None:
                continue
            pos = state_dict[key]
            if pos.shape == level.pos_embed.shape or pos.dim() != 4 or \
                    pos.shape[-1] != level.pos_embed.shape[-1]:
                continue  # fits, or a genuine mismatch that load_state_dict reports
            blocks, tokens = pos.shape[1:3]
            rows, side = math.isqrt(blocks), math.isqrt(tokens)
            if rows * rows != blocks or side * side != tokens:
                raise ValueError(f'NesT: cannot resize {key} of shape {tuple(pos.shape)}: only '
                                 f'square grids of square blocks can be read back as a map')
            pos_map = blocks_to_map(pos.float(), (rows, rows, side, side))
            rows_new, cols_new, bh, bw = level.pos_layout
            pos_map = resize_pos_map(pos_map, (rows_new * bh, cols_new * bw))
            state_dict[key] = map_to_blocks(pos_map, level.pos_layout).to(pos.dtype)
            print_log(f'NesT: resized {key} from {tuple(pos.shape)} to '
                      f'{tuple(state_dict[key].shape)}', logger='current')

    # --- forward ------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input(x)
        x = self.patch_embed(x)
        outs = []
        for i, level in enumerate(self.levels):
            x = level(x)
            if i in self.out_indices:
                out = x
                if i == 2 and hasattr(self, 'norm'):
                    out = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()
                outs.append(out)
        return tuple(outs)


# --- checkpoints ---------------------------------------------------------------------------------
_TIMM_HEAD_KEYS = ('head.weight', 'head.bias')
_OFFICIAL_HEAD_DIM = 32  # every official / timm NesT variant: 96 / 3, 128 / 4, ... channels


def convert_nest_checkpoint(state_dict: Dict[str, torch.Tensor],
                            num_heads: Optional[Sequence[int]] = None,
                            with_head: bool = False) -> 'OrderedDict[str, torch.Tensor]':
    """Convert a timm NesT state dict (``nest_*_jx`` carry the official JAX weights) to our keys.

    timm names the layers of level i ``levels.{i}.transformer_encoder.{j}``; ours are
    ``levels.{i}.layers.{j}``. timm's attention hands its output to ``attn.proj`` with channels
    ordered (head_dim, heads), and its converted official weights follow that order; ours are
    head-major (heads, head_dim), so the input columns of ``attn.proj.weight`` are permuted. That
    needs the heads per level: ``num_heads`` or, by default, dim / 32 as in every official variant.
    Other
    keys keep their names; our own keys pass through unchanged. timm's classifier
    (``head.weight``/``head.bias``) is dropped, or with ``with_head`` renamed to mmpretrain's
    ``LinearClsHead`` keys ``head.fc.weight``/``head.fc.bias``.
    """
    converted = OrderedDict()
    for key, value in state_dict.items():
        if key in _TIMM_HEAD_KEYS:
            if with_head:
                converted['head.fc.' + key.split('.')[-1]] = value
            continue
        match = re.match(r'levels\.(\d+)\.transformer_encoder\.', key)
        if match is None:
            converted[key] = value
            continue
        if key.endswith('.attn.proj.weight'):
            level, dim = int(match.group(1)), value.shape[1]
            heads = num_heads[level] if num_heads is not None and level < len(num_heads) \
                else dim // _OFFICIAL_HEAD_DIM
            if heads > 0 and dim % heads == 0:
                value = value.reshape(value.shape[0], dim // heads, heads).transpose(1, 2)
                value = value.reshape(value.shape[0], dim)
        converted[key.replace('.transformer_encoder.', '.layers.')] = value
    return converted


def describe_nest_checkpoint(state_dict: Dict[str, torch.Tensor]) -> str:
    """Name the NesT arch a (timm or our) state dict was made for, e.g. ``'tiny'``."""
    dims, depths = [], []
    for i in range(NesT.num_levels):
        pos = state_dict.get(f'levels.{i}.pos_embed')
        if pos is None:
            break
        dims.append(int(pos.shape[-1]))
        layer_ids = {
            int(m.group(1))
            for k in state_dict
            for m in [re.match(rf'levels\.{i}\.(?:layers|transformer_encoder)\.(\d+)\.', k)] if m
        }
        depths.append(len(layer_ids))
    if not dims:
        return 'unknown (no levels.*.pos_embed key: not a NesT checkpoint?)'
    for name in ('tiny', 'small', 'base'):
        arch = NesT.arch_zoo[name]
        if arch['embed_dims'] == dims and arch['depths'] == depths:
            return name
    return f'custom(dims={dims}, depths={depths})'
