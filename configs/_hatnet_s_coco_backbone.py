# The HAT-Net-Small backbone of the COCO configs (RetinaNet, Mask R-CNN), which take the TransCNN
# recipes and replace the backbone with this one.
hatnet_s_checkpoint = 'https://github.com/yun-liu/HAT-Net/releases/download/v2.0/HAT-Net_Small.pth'
hatnet_s_backbone = dict(
    type='mmhvit.HATNet',
    arch='small',
    norm_eval=False,  # GroupNorm(1): no batch statistics to keep
    init_cfg=dict(type='Pretrained', checkpoint=hatnet_s_checkpoint))  # converted on load
hatnet_s_channels = [64, 128, 320, 512]  # strides 4-32
# What Swin's recipes exempt from weight decay ('norm', 'absolute_pos_embed',
# 'relative_position_bias_table'), in HAT-Net's names (the Swin-recipe configs): its GroupNorms (no
# position tables). Each key is longer than 'backbone', so that it wins over Mask2Former's
# 'backbone' key (MMEngine takes the longest key that matches).
hatnet_s_no_decay = ['patch_embed.norm', 'attn.norm', 'attn.grid_norm', 'attn.ds_norm',
                     'ffn.pre_norm', 'ffn.norm3', 'downsample.norm']
