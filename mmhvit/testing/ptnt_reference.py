"""PyramidTNT's official computation, restated in plain torch (not a copy of its code).

On an official-format state dict (:func:`ptnt_shapes`, :func:`random_ptnt_state_dict`), float64 in
the tests: :func:`ptnt_forward` gives the stage maps and logits. The keys and shapes of the official
``tnt_pytorch/pyramid_tnt.py`` (huawei-noah/Efficient-AI-Backbones @e560a12; the official modules'
lists are ``tests/data/ptnt_official_keys_*.txt``). Checked once against the official module itself,
run from a local copy outside the repository: the same logits within 1e-14 in float64 (tiny at
192, small at 256, a custom arch with 7 blocks in a stage at 320). At sizes the official module
cannot take, it is this package's definition of the model, written independently of it: the image
zero-padded to a multiple of 8, keys pooled over the sentences that exist (partial border cells),
``outer_pos`` and ``relative_pos`` resized bicubically (the bias along its key axes first; the
package along its query axes first).
"""
import functools
import math

import torch
import torch.nn.functional as F

from .hmhsa_reference import r_bn, r_cell_pool, r_conv
from .state_dicts import add_conv_shapes

SR = [4, 2, 1, 1]  # the official keys' pooling per stage


# --- the official layout and forward, restated ---------------------------------------------------
def ptnt_shapes(arch, img_size, num_classes=1000):
    """Key -> shape of an official PyramidTNT state dict."""
    d, c = arch['embed_dims'], arch['inner_dims']
    shapes = {}
    conv = functools.partial(add_conv_shapes, shapes)

    def norm(name, channels, bn=False):
        for suffix in ('weight', 'bias') + (('running_mean', 'running_var') if bn else ()):
            shapes[f'{name}.{suffix}'] = (channels, )
        if bn:
            shapes[name + '.num_batches_tracked'] = ()

    def linear(name, out, inp, bias=True):
        shapes[name + '.weight'] = (out, inp)
        if bias:
            shapes[name + '.bias'] = (out, )

    grid = img_size // 8
    shapes.update(outer_pos=(1, grid * grid, d[0]), inner_pos=(1, 16, c[0]))
    stem = (('common_conv', 0, 2 * c[0], 3), ('inner_convs', 0, c[0], 2 * c[0]),
            ('outer_convs', 0, 4 * c[0], 2 * c[0]), ('outer_convs', 3, 8 * c[0], 4 * c[0]),
            ('outer_convs', 6, d[0], 8 * c[0]))
    for name, index, out, inp in stem:  # conv, BN, ReLU
        conv(f'patch_embed.{name}.{index}', out, inp, 3)
        norm(f'patch_embed.{name}.{index + 1}', out, bn=True)
    for i in range(1, 4):
        for kind, dims in (('word', c), ('sentence', d)):
            norm(f'{kind}_merges.{i - 1}.norm', dims[i - 1])
            conv(f'{kind}_merges.{i - 1}.conv.0', dims[i], dims[i - 1], 3)
    for i, depth in enumerate(arch['depths']):
        for j in range(depth):
            name = f'stages.{i}.blocks.{j}.'
            if j == 0 or (j == 1 and depth > 6):
                norm(name + 'inner_norm1', 16 * c[i])
                linear(name + 'inner_attn.q', c[i], c[i], bias=False)
                linear(name + 'inner_attn.kv', 2 * c[i], c[i], bias=False)
                linear(name + 'inner_attn.proj', c[i], c[i])
                norm(name + 'inner_norm2', 16 * c[i])
                linear(name + 'inner_mlp.fc1', 4 * c[i], c[i])
                linear(name + 'inner_mlp.fc2', c[i], 4 * c[i])
                norm(name + 'proj_norm1', 16 * c[i])
                linear(name + 'proj', d[i], 16 * c[i], bias=False)
                norm(name + 'proj_norm2', d[i])
            norm(name + 'outer_norm1', d[i])
            linear(name + 'outer_attn.q', d[i], d[i], bias=False)
            linear(name + 'outer_attn.kv', 2 * d[i], d[i], bias=False)
            linear(name + 'outer_attn.proj', d[i], d[i])
            if SR[i] > 1:
                linear(name + 'outer_attn.linear', d[i], d[i])
                norm(name + 'outer_attn.norm', d[i])
            norm(name + 'outer_norm2', d[i])
            linear(name + 'outer_mlp.fc1', 4 * d[i], d[i])
            linear(name + 'outer_mlp.fc2', d[i], 4 * d[i])
        queries = grid * grid // 4**i
        shapes[f'stages.{i}.relative_pos'] = (1, arch['num_heads'][i], queries,
                                              queries // SR[i]**2)
    norm('norm', d[3])
    linear('head', num_classes, d[3])
    return shapes


def random_ptnt_state_dict(shapes, seed=0, dtype=torch.float64):
    """Random official weights giving O(1) activations, non-uniform attention, a strong bias."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(shape, low, high):
        return torch.rand(shape, generator=gen, dtype=dtype) * (high - low) + low

    sd = {}
    for key, shape in shapes.items():
        suffix = key.rsplit('.', 1)[-1]
        if suffix == 'num_batches_tracked':
            sd[key] = torch.tensor(0)
        elif suffix in ('running_mean', 'bias'):
            sd[key] = uniform(shape, -.2, .2)
        elif suffix == 'running_var' or len(shape) == 1:  # BN variances, norm weights
            sd[key] = uniform(shape, .5, 1.5)
        elif suffix == 'relative_pos':  # the official init, randn
            sd[key] = torch.randn(shape, generator=gen, dtype=dtype)
        elif key in ('outer_pos', 'inner_pos'):
            sd[key] = torch.randn(shape, generator=gen, dtype=dtype) * .2
        else:
            sd[key] = torch.randn(shape, generator=gen, dtype=dtype) * .5 / math.sqrt(
                math.prod(shape[1:]))
    return sd


def r_ln(x, sd, name):
    return F.layer_norm(x, sd[name + '.weight'].shape, sd[name + '.weight'], sd[name + '.bias'])


def r_linear(x, sd, name):
    return F.linear(x, sd[name + '.weight'], sd.get(name + '.bias'))


def r_resize(grid_map, size):
    return F.interpolate(grid_map, size=size, mode='bicubic', align_corners=False)


def ptnt_bias(bias, grid, key_grid):
    """relative_pos (1, heads, h*w, hk*wk) of square grids, resized keys first."""
    heads, queries, keys = bias.shape[1:]
    side, key_side = math.isqrt(queries), math.isqrt(keys)
    if (side, side, key_side, key_side) == (*grid, *key_grid):
        return bias
    x = r_resize(bias.reshape(1, heads * queries, key_side, key_side), key_grid)
    x = x.reshape(heads, side, side, -1).permute(0, 3, 1, 2).reshape(1, -1, side, side)
    x = r_resize(x, grid).reshape(heads, -1, grid[0] * grid[1])
    return x.transpose(1, 2)[None]


def r_attention(sd, name, x, heads, sr=1, grid=None, bias=None):
    batch, tokens, channels = x.shape
    source = x
    if sr > 1:
        pooled = r_cell_pool(x.transpose(1, 2).reshape(batch, channels, *grid), sr, 'mean')
        source = r_ln(r_linear(pooled.flatten(2).transpose(1, 2), sd, name + '.linear'), sd,
                      name + '.norm')
    q = r_linear(x, sd, name + '.q').reshape(batch, tokens, heads, -1).transpose(1, 2)
    k, v = r_linear(source, sd, name + '.kv').reshape(batch, -1, 2, heads,
                                                        channels // heads).permute(2, 0, 3, 1, 4)
    logits = q @ k.transpose(-2, -1) * (channels // heads)**-0.5
    weights = (logits if bias is None else logits + bias).softmax(-1)
    return r_linear((weights @ v).transpose(1, 2).reshape(batch, tokens, channels), sd,
                    name + '.proj')


def r_mlp(x, sd, name):
    return r_linear(F.gelu(r_linear(x, sd, name + '.fc1')), sd, name + '.fc2')


def r_block(sd, name, words, sentences, grid, bias, heads, inner_heads, sr):
    batch, tokens, _ = sentences.shape
    if name + 'inner_norm1.weight' in sd:
        def flat(t):
            return t.reshape(batch, tokens, -1)

        normed = r_ln(flat(words), sd, name + 'inner_norm1').reshape(words.shape)
        words = words + r_attention(sd, name + 'inner_attn', normed, inner_heads)
        normed = r_ln(flat(words), sd, name + 'inner_norm2').reshape(words.shape)
        words = words + r_mlp(normed, sd, name + 'inner_mlp')
        update = r_linear(r_ln(flat(words), sd, name + 'proj_norm1'), sd, name + 'proj')
        sentences = sentences + r_ln(update, sd, name + 'proj_norm2')
    normed = r_ln(sentences, sd, name + 'outer_norm1')
    sentences = sentences + r_attention(sd, name + 'outer_attn', normed, heads, sr, grid, bias)
    return words, sentences + r_mlp(r_ln(sentences, sd, name + 'outer_norm2'), sd,
                                    name + 'outer_mlp')


def r_stem(sd, x):
    x = F.relu(r_bn(r_conv(x, sd, 'patch_embed.common_conv.0', stride=2, padding=1), sd,
                    'patch_embed.common_conv.1'))
    words = F.relu(r_bn(r_conv(x, sd, 'patch_embed.inner_convs.0', padding=1), sd,
                        'patch_embed.inner_convs.1'))
    batch, channels = words.shape[:2]
    words = F.unfold(words, 4, stride=4).transpose(1, 2)  # the official nn.Unfold
    words = words.reshape(-1, channels, 16).transpose(1, 2)
    for index, stride in ((0, 2), (3, 2), (6, 1)):
        x = F.relu(r_bn(r_conv(x, sd, f'patch_embed.outer_convs.{index}', stride=stride,
                               padding=1), sd, f'patch_embed.outer_convs.{index + 1}'))
    return words, x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


def r_word_merge(sd, name, words, grid):
    """The official WordAggregation: zero sentences for odd grids, 2 x 2 sentences' words
    regrouped by slicing, a conv per group."""
    rows, cols = grid
    x = F.layer_norm(words, words.shape[-1:], sd[name + '.norm.weight'], sd[name + '.norm.bias'])
    x = x.reshape(-1, rows, cols, 4, 4, x.shape[-1]).permute(0, 3, 4, 5, 1, 2)
    x = F.pad(x, (0, cols % 2, 0, rows % 2)).permute(0, 4, 5, 1, 2, 3)
    left = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2]], 3)
    right = torch.cat([x[:, 0::2, 1::2], x[:, 1::2, 1::2]], 3)
    x = torch.cat([left, right], 4).reshape(-1, 8, 8, x.shape[-1]).permute(0, 3, 1, 2)
    x = r_conv(x, sd, name + '.conv.0', stride=2, padding=1)
    return x.reshape(x.shape[0], x.shape[1], 16).transpose(1, 2)


def r_sentence_merge(sd, name, sentences, grid):
    x = r_ln(sentences, sd, name + '.norm').transpose(1, 2).reshape(sentences.shape[0], -1, *grid)
    x = r_conv(x, sd, name + '.conv.0', stride=2, padding=1)
    return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


def ptnt_forward(sd, x, arch):
    """The official PyramidTNT forward: (4 stage maps, the last after ``norm``; logits)."""
    height, width = x.shape[-2:]
    words, sentences, grid = r_stem(sd, F.pad(x, (0, -width % 8, 0, -height % 8)))
    side = math.isqrt(sd['outer_pos'].shape[1])
    pos = r_resize(sd['outer_pos'].reshape(1, side, side, -1).permute(0, 3, 1, 2), grid)
    words, sentences = words + sd['inner_pos'], sentences + pos.flatten(2).transpose(1, 2)
    maps = []
    for i, depth in enumerate(arch['depths']):
        if i:
            words = r_word_merge(sd, f'word_merges.{i - 1}', words, grid)
            sentences, grid = r_sentence_merge(sd, f'sentence_merges.{i - 1}', sentences, grid)
        key_grid = tuple(math.ceil(n / SR[i]) for n in grid)
        bias = ptnt_bias(sd[f'stages.{i}.relative_pos'], grid, key_grid)
        for j in range(depth):
            words, sentences = r_block(sd, f'stages.{i}.blocks.{j}.', words, sentences, grid,
                                       bias, arch['num_heads'][i], arch['inner_num_heads'][i],
                                       SR[i])
        out = r_ln(sentences, sd, 'norm') if i == 3 else sentences
        maps.append(out.transpose(1, 2).reshape(x.shape[0], -1, *grid))
    return maps, F.linear(maps[-1].mean((2, 3)), sd['head.weight'], sd['head.bias'])
