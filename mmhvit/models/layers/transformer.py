"""The pre-norm transformer layer NesT, TNT and PyramidTNT share, and its attentions."""
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath

from .attention import multihead_attention
from .lean import lean_applies, lean_layer
from .mlp import Mlp
from .pooling import pool_cells
from .pos_embed import AttnBiasRows
from .windows import (
    cls_window_key_masks,
    fitted_window,
    pad_nhwc,
    padding_to_multiple,
    window_key_mask,
    window_partition,
    window_reverse,
)

# (real, padded) token grids, each (rows, columns): a windowed attention lays its windows on the
# real grid and reads its tokens, row-major, from the padded one.
TokenGrids = Tuple[Tuple[int, int], Tuple[int, int]]


class MultiheadSelfAttention(nn.Module):
    """Multi-head self-attention over token groups (blocks, sentences), one ``qkv`` projection.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Heads; ``embed_dims`` must be divisible by it.
        qkv_bias (bool): Bias of the qkv projection.
        attn_drop_rate (float): Dropout on the attention weights.
        proj_drop_rate (float): Dropout after the output projection.
    """

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 attn_drop_rate: float = 0., proj_drop_rate: float = 0.):
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} is not divisible by num_heads {num_heads}')
        self.num_heads = num_heads
        self.attn_drop_rate = attn_drop_rate
        self.attn_kernel = 'auto'  # see set_attention_kernel
        # [q | k | v], each head-major (the official NesT and TNT layouts)
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop_rate)
        self.lean = True  # see mmhvit.models.layers.lean
        self.recompute_long_attention = False  # see multihead_attention

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None,
                pre_norm: Optional[nn.Module] = None) -> torch.Tensor:
        q, k, v = self.project(self.qkv, x, pre_norm).chunk(3, dim=-1)
        return self.proj_drop(self.proj(self._attend(q, k, v, key_mask)))

    def project(self, layer: nn.Module, x: torch.Tensor,
                pre_norm: Optional[nn.Module]) -> torch.Tensor:
        """``layer(pre_norm(x))``, backward keeping ``x`` rather than the normed tokens."""
        return lean_layer([pre_norm], layer, x, self.lean)

    def _attend(self, q, k, v, key_mask):
        return multihead_attention(q, k, v, self.num_heads, key_mask=key_mask,
                                   dropout_p=self.attn_drop_rate if self.training else 0.,
                                   kernel=self.attn_kernel,
                                   recompute=self.lean,
                                   recompute_long=self.recompute_long_attention)


class ClassTokenWindowAttention(MultiheadSelfAttention):
    """Self-attention of a class token and a grid of tokens, optionally in windows (ViTDet's).

    With ``window_size`` set, each grid token attends only to the tokens of its ``window_size``
    x ``window_size`` window (windows tile the real grid from the top left) and to the class
    token, while the class token still attends to every token. The parameters are those of the
    global attention (state dicts load both ways), and the class token keeps a view of the whole
    grid: every window holds it as one more key, so it stays in every token's context and is
    updated in every layer, at the price of one query and one key per window. Partial windows at
    the bottom / right are padded and the padding masked out of the keys, so the valid outputs do
    not depend on it; a grid side shorter than the window gets one window of that side (the same
    result without the wasted tokens). When one window covers the grid, this is global attention.
    Without ``window_size`` it is :class:`MultiheadSelfAttention`, the class token included.

    Args:
        *args: ``embed_dims``, ``num_heads``, ``qkv_bias``, ``attn_drop_rate``,
            ``proj_drop_rate`` (:class:`MultiheadSelfAttention`).
        window_size (int, optional): Window side in tokens; None: global attention.
    """

    def __init__(self, *args, window_size: Optional[int] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.window_size = window_size

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None,
                grid: Optional[TokenGrids] = None,
                pre_norm: Optional[nn.Module] = None) -> torch.Tensor:
        """Attend; the output has the input's layout.

        Args:
            x (Tensor): (B, 1 + N, C), the class token, then the N tokens of the padded grid.
            key_mask (Tensor, optional): Bool (1, 1 + N), True for real tokens; None: all real.
            grid (tuple): The real and padded grids (:data:`TokenGrids`); needed with windows.
            pre_norm (nn.Module, optional): The norm applied to ``x`` first.

        Returns:
            Tensor: (B, 1 + N, C); tokens outside the real grid get a zero attention update.
        """
        if self.window_size is None:
            return super().forward(x, key_mask, pre_norm)
        if grid is None:
            raise ValueError(f'a windowed {type(self).__name__} needs the token grid (grid=)')
        (rows, cols), (padded_rows, padded_cols) = grid
        batch, channels = x.shape[0], x.shape[-1]
        win_h, win_w = fitted_window(self.window_size, rows, cols)
        pad_h, pad_w = padding_to_multiple(rows, cols, win_h, win_w)
        windows = self._partition(self.project(self.qkv, x, pre_norm), grid, pad_h, pad_w, win_h,
                                  win_w)
        count = windows.shape[0] // batch  # windows per image
        window_mask, cls_mask = cls_window_key_masks(
            window_key_mask(rows, cols, pad_h, pad_w, win_h, win_w, x.device), count,
            win_h * win_w, x.device)
        q, k, v = windows.chunk(3, dim=-1)
        out = self._attend(q[:, 1:], k, v, window_mask)
        # The class query of the first window against the keys of all windows: every real
        # token once, and (through cls_mask) one of the copies of the class token's own key.
        cls_out = self._attend(q.reshape(batch, count, -1, channels)[:, 0, :1],
                               k.reshape(batch, -1, channels), v.reshape(batch, -1, channels),
                               cls_mask)
        out = window_reverse(out, win_h, win_w, rows + pad_h, cols + pad_w)[:, :rows, :cols]
        # Tokens wholly outside the real grid (padded by the caller) were in no window: their
        # (discarded) outputs get a zero attention update.
        out = pad_nhwc(out, padded_rows - rows, padded_cols - cols).flatten(1, 2)
        return self.proj_drop(self.proj(torch.cat([cls_out, out], dim=1)))

    @staticmethod
    def _partition(qkv: torch.Tensor, grid: TokenGrids, pad_h, pad_w, win_h: int,
                   win_w: int) -> torch.Tensor:
        """(B, 1 + N, 3C) -> (B * windows, 1 + win_h * win_w, 3C): the windows of the real grid,
        each led by the class token.

        One tensor holds the windows' queries, keys and values with the class token's: attention
        then saves views of it for the backward pass, and no other copy of them stays alive.
        """
        (rows, cols), padded = grid
        tokens = qkv[:, 1:].reshape(qkv.shape[0], *padded, -1)[:, :rows, :cols]
        windows = window_partition(pad_nhwc(tokens, pad_h, pad_w), win_h, win_w)
        count = windows.shape[0] // qkv.shape[0]
        cls = qkv[:, :1, None].expand(-1, count, -1, -1).reshape(-1, 1, qkv.shape[-1])
        return torch.cat([cls, windows], dim=1)


class ReducedAttention(nn.Module):
    """Attention of tokens on an h x w grid to keys and values pooled from it: queries ``q(x)``
    against ``kv(norm(reduce(AvgPool_sr(x))))`` (PVT's spatial reduction; ``kv(x)`` when sr = 1),
    plus an optional additive (queries x keys) bias; PyramidTNT's outer ``Attention``. A partial
    pooled cell at the bottom / right border averages the tokens that exist (:func:`pool_cells`),
    so no padding enters a key.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Heads.
        sr_ratio (int): Pooling of the keys and values (cells of sr x sr tokens).
        qkv_bias (bool): Bias of ``q`` and ``kv``.
        attn_drop_rate (float): Dropout on the attention weights.
        proj_drop_rate (float): Dropout after the output projection.
        norm_cfg (dict): The norm after the reduction.
    """

    def __init__(self, embed_dims: int, num_heads: int, sr_ratio: int = 1, qkv_bias: bool = False,
                 attn_drop_rate: float = 0., proj_drop_rate: float = 0.,
                 norm_cfg: dict = dict(type='LN')):
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} is not divisible by num_heads {num_heads}')
        self.num_heads, self.sr_ratio, self.attn_drop_rate = num_heads, sr_ratio, attn_drop_rate
        self.attn_kernel = 'auto'  # see set_attention_kernel
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)  # rows: k, then v
        if sr_ratio > 1:
            self.reduce = nn.Linear(embed_dims, embed_dims)
            self.reduce_norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop_rate)
        self.lean = True  # see mmhvit.models.layers.lean
        self.recompute_long_attention = False  # see multihead_attention

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None,
                grid: Optional[Tuple[int, int]] = None,
                attn_bias: Union[torch.Tensor, AttnBiasRows, None] = None,
                pre_norm: Optional[nn.Module] = None) -> torch.Tensor:
        """x: (B, h * w, C) tokens of an h x w ``grid``; ``attn_bias``: (1, heads, queries,
        keys), or :class:`AttnBiasRows` to attend a few query rows at a time; ``pre_norm``: the
        norm applied to ``x`` first (backward keeps ``x`` rather than the normed tokens)."""
        lean = self.lean and lean_applies([pre_norm], self.q)
        # The normed tokens once, unless nothing but the lean projections (which recompute them)
        # reads them.
        normed = None if lean and self.sr_ratio == 1 else (x if pre_norm is None else pre_norm(x))

        def project(layer: nn.Module) -> torch.Tensor:
            return lean_layer([pre_norm], layer, x) if lean else layer(normed)

        if self.sr_ratio > 1:
            keys = normed.transpose(1, 2).reshape(x.shape[0], -1, *grid)
            keys = pool_cells(keys, self.sr_ratio, 'avg').flatten(2).transpose(1, 2)
            kv = self.kv(self.reduce_norm(self.reduce(keys)))
        else:
            kv = project(self.kv)
        k, v = kv.chunk(2, dim=-1)
        q = project(self.q)
        if isinstance(attn_bias, AttnBiasRows) and not self.recomputes_long_attention(x.device):
            out = torch.cat([self._attend(q[:, start:end], k, v, key_mask, bias)
                             for start, end, bias in attn_bias], dim=1)
        else:  # (recomputed attention makes the rows of an AttnBiasRows chunk by chunk itself)
            out = self._attend(q, k, v, key_mask, attn_bias)
        return self.proj_drop(self.proj(out))

    def recomputes_long_attention(self, device: torch.device) -> bool:
        """Whether a forward on ``device`` recomputes the weights of this (long, biased)
        attention in backward: the matmul kernel's, which ``'auto'`` takes on the CPU."""
        kernel = self.attn_kernel
        return (self.lean and self.recompute_long_attention and torch.is_grad_enabled()
                and (kernel == 'matmul' or kernel == 'auto' and device.type == 'cpu'))

    def _attend(self, q, k, v, key_mask, bias):
        return multihead_attention(q, k, v, self.num_heads, key_mask=key_mask, attn_bias=bias,
                                   dropout_p=self.attn_drop_rate if self.training else 0.,
                                   kernel=self.attn_kernel,
                                   recompute=self.lean,
                                   recompute_long=self.recompute_long_attention)


class TransformerLayer(nn.Module):
    """``x + drop_path(attn(norm1(x)))``, then ``x + drop_path(mlp(norm2(x)))``.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads.
        mlp_ratio (float): Hidden / input channels of the MLP.
        qkv_bias (bool): Bias of the qkv projection.
        drop_rate (float): Dropout after the attention projection and in the MLP.
        attn_drop_rate (float): Dropout on the attention weights.
        drop_path_rate (float): Stochastic depth of this layer.
        norm_cfg (dict): Norm layers (over the last dimension).
        act_cfg (dict): MLP activation.
        norm_shape (Sequence[int], optional): The trailing dimensions both norms normalise
            jointly (a LayerNorm's ``normalized_shape``); default ``(embed_dims, )``, each token
            alone. PyramidTNT's inner layers normalise the 16 words of a sentence together:
            ``(16, embed_dims)``.
        attn (nn.Module, optional): The attention, called as ``attn(x, key_mask=...,
            pre_norm=norm1, **attn_kwargs)``; default :class:`MultiheadSelfAttention` (from
            ``num_heads``, ``qkv_bias``, ``attn_drop_rate``, ``drop_rate``).
    """

    def __init__(self, embed_dims: int, num_heads: int, mlp_ratio: float = 4.,
                 qkv_bias: bool = True, drop_rate: float = 0., attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0., norm_cfg: dict = dict(type='LN'),
                 act_cfg: dict = dict(type='GELU'), norm_shape: Optional[Sequence[int]] = None,
                 attn: Optional[nn.Module] = None):
        super().__init__()
        norm_shape = embed_dims if norm_shape is None else tuple(norm_shape)
        self.norm1 = build_norm_layer(norm_cfg, norm_shape)[1]
        self.attn = attn if attn is not None else MultiheadSelfAttention(
            embed_dims, num_heads, qkv_bias=qkv_bias, attn_drop_rate=attn_drop_rate,
            proj_drop_rate=drop_rate)
        self.norm2 = build_norm_layer(norm_cfg, norm_shape)[1]
        self.mlp = Mlp(embed_dims, int(embed_dims * mlp_ratio), act_cfg=act_cfg,
                       drop_rate=drop_rate)
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor] = None,
                **attn_kwargs) -> torch.Tensor:
        x = x + self.drop_path(self.attn(x, key_mask=key_mask, pre_norm=self.norm1,
                                         **attn_kwargs))
        return x + self.drop_path(self.feed_forward(x, key_mask))

    def feed_forward(self, x: torch.Tensor, key_mask: Optional[torch.Tensor]) -> torch.Tensor:
        """The MLP branch on ``norm2(x)`` (a subclass may gate it, e.g. TNT's
        squeeze-excitation)."""
        return self.mlp(x, self.norm2)
