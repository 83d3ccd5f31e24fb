"""One set of tiny archs: a CPU-sized variant of every backbone, for the tests, the GPU check's
dry run and any check that exercises the code rather than an arch; the families by name
(``FAMILIES``) and :func:`build_tiny`.

Every stage has blocks, and windows / blocks / pooled cells are small enough to need padding at
odd sizes (and to be whole at multiples of 128, where the official code runs). A test that needs
one more property derives it from these, e.g. ``dict(TINY_ARCHS['NesT']['arch'], depths=...)``.
"""
from ..models.backbones import TNT, HATNet, NesT, PyramidTNT, TransCNN

FAMILIES = {'TransCNN': TransCNN, 'HATNet': HATNet, 'NesT': NesT, 'TNT': TNT,
            'PyramidTNT': PyramidTNT}

TINY_ARCHS = {
    'TransCNN': dict(arch=dict(embed_dims=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                               num_heads=[1, 1, 2, 2], mlp_ratio=[2, 2, 2, 2],
                               grid_sizes=[4, 4, 4, 1], ds_ratios=[4, 2, 2, 1])),
    'HATNet': dict(arch=dict(embed_dims=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                             num_heads=[1, 1, 2, 2], mlp_ratio=[2, 2, 2, 2],
                             grid_sizes=[4, 3, 3, 1], ds_ratios=[4, 2, 2, 1])),
    'NesT': dict(arch=dict(embed_dims=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                           num_heads=[1, 2, 2, 4], block_size=4), pretrain_img_size=64),
    'TNT': dict(arch=dict(embed_dims=16, inner_dims=4, depths=[1, 1, 1, 1], num_heads=2,
                          inner_num_heads=1), pretrain_img_size=64),
    # 8-channel words: the word merges normalise each word over its channels, and with 2-4 of
    # them bf16 autocast's rounding grows to 2-5% of the outputs (1% here).
    'PyramidTNT': dict(arch=dict(embed_dims=[16, 32, 64, 64], inner_dims=[8, 8, 16, 16],
                                 depths=[1, 1, 1, 1], num_heads=[1, 2, 2, 4],
                                 inner_num_heads=[1, 1, 2, 2]), pretrain_img_size=64),
}


def tiny_arch(family: str, **changes) -> dict:
    """A copy of the tiny arch dict of ``family`` with ``changes`` (``depths=[1, 2, 1, 0]``)."""
    return dict(TINY_ARCHS[family]['arch'], **changes)


def build_tiny(family: str, **kwargs):
    """The tiny ``family`` backbone, without drop path unless ``kwargs`` set it."""
    return FAMILIES[family](**{**TINY_ARCHS[family], 'drop_path_rate': 0., **kwargs})
