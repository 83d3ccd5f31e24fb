# The TransCNN-B (= Small) backbone of the Swin-recipe configs (Cascade Mask R-CNN, DINO,
# Mask2Former), which add it to their recipes.
transcnn_b_checkpoint = ('https://github.com/yun-liu/TransCNN/releases/download/v1.0/'
                         'TransCNN-Small.pth')
transcnn_b_backbone = dict(
    _delete_=True,  # replaces the base recipe's ResNet
    type='mmhvit.TransCNN',
    arch='base',
    norm_eval=True,  # BN keeps its ImageNet statistics at 2 images per GPU
    init_cfg=dict(type='Pretrained', checkpoint=transcnn_b_checkpoint))
transcnn_b_channels = [64, 128, 256, 512]  # strides 4-32
# What Swin's recipes exempt from weight decay ('norm', 'absolute_pos_embed',
# 'relative_position_bias_table'), in TransCNN's names: its BNs (no position tables). Each key is
# longer than 'backbone', so that it wins over Mask2Former's 'backbone' key (MMEngine takes the
# longest key that matches).
transcnn_b_no_decay = ['patch_embed.norm', 'attn.norm', 'attn.grid_norm', 'attn.ds_norm',
                       'ffn.norm1', 'ffn.norm2', 'ffn.norm3', 'downsample.norm']
