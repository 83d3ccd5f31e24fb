from .activation import build_inplace_activation
from .attention import (
                        ATTENTION_KERNELS,
                        export_attention_chunk,
                        merge_heads,
                        multihead_attention,
                        set_attention_kernel,
                        split_heads,
)
from .export import is_exporting
from .hmhsa import HMHSA, grid_attention
from .hmhsa_blocks import (
                        ConvDownsample,
                        InvertedResidual,
                        TransCNNBlock,
                        TransCNNStage,
                        TwoBranchDownsample,
)
from .mlp import Mlp
from .nest_blocks import (
                        BlockAggregation,
                        NesTPatchEmbed,
                        NesTStage,
                        blocks_to_map,
                        map_to_blocks,
)
from .norm import LayerNorm2d, build_norm2d, is_batch_norm
from .pooling import pool_cells
from .pos_embed import AttnBiasRows, resize_attn_bias, resize_pos_map
from .pyramid import build_rescale
from .pyramid_tnt_blocks import (
                        PyramidTNTBlock,
                        PyramidTNTStage,
                        PyramidTNTStem,
                        PyramidTNTUpsample,
                        SentenceMerge,
                        WordMerge,
)
from .stage import BackboneStage
from .tnt_blocks import (
                        PATCH_SIZE,
                        WORD_SIZE,
                        TNTBlock,
                        TNTEmbed,
                        TNTStage,
                        WordMap,
                        WordsToSentence,
                        words_to_map,
)
from .transformer import (
                        ClassTokenWindowAttention,
                        MultiheadSelfAttention,
                        ReducedAttention,
                        TokenGrids,
                        TransformerLayer,
)
from .weight_init import trunc_normal_init
from .windows import (
                        ceil_div,
                        cls_window_key_masks,
                        fitted_window,
                        pad_nchw,
                        pad_nhwc,
                        padding_to_multiple,
                        window_key_mask,
                        window_partition,
                        window_reverse,
)

__all__ = [
    'build_inplace_activation',
    'ATTENTION_KERNELS', 'multihead_attention', 'set_attention_kernel', 'export_attention_chunk',
    'split_heads',
    'merge_heads', 'is_batch_norm', 'HMHSA', 'grid_attention', 'pool_cells', 'Mlp',
    'LayerNorm2d',
    'build_norm2d',
    'resize_pos_map', 'resize_attn_bias', 'AttnBiasRows',
    'build_rescale', 'BackboneStage', 'MultiheadSelfAttention', 'ReducedAttention',
    'ClassTokenWindowAttention', 'TokenGrids', 'TransformerLayer',
    'padding_to_multiple', 'pad_nchw', 'pad_nhwc', 'window_partition', 'window_reverse',
    'window_key_mask', 'cls_window_key_masks', 'fitted_window', 'is_exporting', 'ceil_div',
    'trunc_normal_init', 'PATCH_SIZE', 'WORD_SIZE', 'TNTBlock', 'TNTEmbed', 'WordMap',
    'WordsToSentence', 'words_to_map', 'TNTStage',
    'InvertedResidual', 'TransCNNBlock', 'TransCNNStage', 'TwoBranchDownsample', 'ConvDownsample',
    'NesTPatchEmbed', 'BlockAggregation', 'NesTStage', 'blocks_to_map', 'map_to_blocks',
    'PyramidTNTStem', 'WordMerge', 'SentenceMerge', 'PyramidTNTBlock', 'PyramidTNTStage',
    'PyramidTNTUpsample'
]
