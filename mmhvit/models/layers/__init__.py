from .attention import merge_heads, multihead_attention, sdpa_only, split_heads
from .mlp import Mlp
from .norm import LayerNorm2d, build_norm2d
from .pos_embed import resize_pos_map
from .pyramid import SimplePyramid
from .windows import (pad_nchw, pad_nhwc, padding_to_multiple, window_key_mask,
                      window_partition, window_reverse)

__all__ = [
    'multihead_attention', 'sdpa_only', 'split_heads', 'merge_heads', 'Mlp', 'LayerNorm2d',
    'build_norm2d', 'resize_pos_map', 'SimplePyramid', 'padding_to_multiple', 'pad_nchw',
    'pad_nhwc', 'window_partition', 'window_reverse', 'window_key_mask'
]
