# The NesT-T backbone of the Swin-recipe configs (Cascade Mask R-CNN, DINO, Mask2Former), which
# add it to their recipes. timm's nest_tiny_jx: the official JAX weights, converted on load; the
# stride-32 map is the extra aggregation (new, not pretrained).
nest_t_checkpoint = ('https://github.com/rwightman/pytorch-image-models/releases/download/'
                     'v0.1-vt3p-weights/jx_nest_tiny-e3428fb9.pth')
nest_t_backbone = dict(
    _delete_=True,  # replaces the base recipe's ResNet
    type='mmhvit.NesT',
    arch='tiny',
    init_cfg=dict(type='Pretrained', checkpoint=nest_t_checkpoint))
nest_t_channels = [96, 192, 384, 768]  # strides 4-32
# What Swin's recipes exempt from weight decay ('norm', 'absolute_pos_embed',
# 'relative_position_bias_table'), in NesT's names: its norms and position embeddings. Each key is
# longer than 'backbone', so that it wins over Mask2Former's 'backbone' key (MMEngine takes the
# longest key that matches); NesT-T's blocks per level are 2, 2 and 8.
nest_t_no_decay = ['pos_embed', 'downsample.norm', '.out_norm',
                   *[f'blocks.{i}.norm' for i in range(8)]]
