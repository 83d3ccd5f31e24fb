# Quickstart: retinanet_r50-w16_16e_shapes.py (same model, data and recipe) with an H-MHSA plugin
# after conv3 of every bottleneck of stages 2-4 (13 blocks), as the TransCNN paper inserts H-MHSA
# "into any CNN". At 256 x 256 the stride-8/16/32 maps are 32/16/8 pixels: 8 x 8 windows, keys
# pooled by 4 (8 x 8, 4 x 4, 2 x 2 keys); 32-channel heads (1, 2, 4 heads, as TransCNN-quarter).
_base_ = './retinanet_r50-w16_16e_shapes.py'
model = dict(
    backbone=dict(plugins=[
        dict(cfg=dict(type='mmhvit.HMHSAPlugin', grid_size=8, ds_ratio=4, head_dims=32),
             stages=(False, True, True, True), position='after_conv3')
    ]))
work_dir = './work_dirs/retinanet_r50-w16-hmhsa_16e_shapes'
