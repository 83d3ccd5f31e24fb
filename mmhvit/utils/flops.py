"""FLOP counting with and without the attention matrix products.

MMEngine's counter (fvcore's rules: one multiply-add = one FLOP) has no rule for
``scaled_dot_product_attention``, so by default it leaves out the two matrix products of attention,
as the official TransCNN figures do. ``with_attention=True`` counts them too: Q K^T and A V cost
Nq * Nk * (d_qk + d_v) multiply-adds per head and image.
"""
from math import prod
from typing import Any, List, Tuple

import torch.nn as nn
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import get_shape

from mmhvit.models.layers import set_attention_kernel


def sdpa_flop_jit(inputs: List[Any], outputs: List[Any]) -> int:
    q_shape, k_shape, v_shape = (get_shape(v) for v in inputs[:3])
    *batch, queries, qk_dim = q_shape
    keys, v_dim = k_shape[-2], v_shape[-1]
    return prod(batch) * queries * keys * (qk_dim + v_dim)


def count_flops(model: nn.Module, inputs: Tuple, with_attention: bool) -> int:
    """Total FLOPs (multiply-adds) of ``model(*inputs)``."""
    analyzer = FlopAnalyzer(model, inputs)
    if with_attention:
        analyzer.set_op_handle('aten::scaled_dot_product_attention', sdpa_flop_jit)
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    # The CPU's short-sequence matmuls would hide among the other matmuls: route this model's
    # attention through SDPA while counting.
    previous = set_attention_kernel(model, 'sdpa')
    try:
        return analyzer.total()
    finally:
        for module, kernel in previous.items():
            module.attn_kernel = kernel


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
