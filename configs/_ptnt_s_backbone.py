# The PyramidTNT-S backbone of the COCO and ADE20K configs, which add it to their recipes.
# The official weights (82.0 top-1) are on BaiduDisk only (huawei-noah/Efficient-AI-Backbones
# tnt_pytorch/readme.md, password v5w5): download the file to ptnt_s_checkpoint; it is converted on
# load (or convert it first: tools/model_converters/ptnt2mmhvit.py).
ptnt_s_checkpoint = 'checkpoints/ptnt_s_82.0.pth.tar'
ptnt_s_backbone = dict(
    _delete_=True,  # replaces the base recipe's ResNet
    type='mmhvit.PyramidTNT',
    arch='small',
    drop_path_rate=0.1,
    # The stem's BN (pretrained) and the upsampling's (new) with statistics over all GPUs' images:
    # 2 per GPU are too few for the new ones, and norm_eval would freeze them at their init.
    conv_norm_cfg=dict(type='SyncBN', requires_grad=True),
    init_cfg=dict(type='Pretrained', checkpoint=ptnt_s_checkpoint))
# Strides 8-32 only (RetinaNet): the stride-4 branch is not built, so no parameter goes unused.
ptnt_s_backbone_c3_c5 = dict(ptnt_s_backbone, out_indices=(1, 2, 3))
# No weight decay on norms and the position embeddings (the official pre-training decays
# relative_pos, as here).
ptnt_paramwise_cfg = dict(norm_decay_mult=0., custom_keys={'pos_embed': dict(decay_mult=0.)})
ptnt_s_channels = [128, 256, 512, 512]  # strides 4-32
# What Swin's recipes exempt from weight decay ('norm', 'absolute_pos_embed',
# 'relative_position_bias_table'), in PyramidTNT's names (the Swin-recipe configs): its norms (the
# stem's and the upsampling's BNs by position in their Sequentials), the position embeddings and,
# as Swin's relative-position bias table, relative_pos. Each key is longer than 'backbone', so that
# it wins over Mask2Former's 'backbone' key (MMEngine takes the longest key that matches).
ptnt_s_no_decay = ['pos_embed', 'relative_pos', 'inner.norm', 'outer.norm', 'word_proj.norm',
                   'reduce_norm', 'merge.norm', 'stages.3.norm', 'out_proj.1.', 'out_proj.4.',
                   'common_conv.1.', 'inner_convs.1.', 'outer_convs.1.', 'outer_convs.4.',
                   'outer_convs.7.']
