# Mask R-CNN, HAT-Net-Small (25.7M), COCO 2017, 1x schedule, 8 GPUs x 2 images.
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
# The TransCNN recipe (HAT-Net's authors follow the same PVT recipes) with the HAT-Net backbone.
_base_ = './mask_rcnn_transcnn_b_coco.py'

checkpoint = 'https://github.com/yun-liu/HAT-Net/releases/download/v2.0/HAT-Net_Small.pth'
model = dict(
    backbone=dict(
        type='mmhvit.HATNet',
        arch='small',
        norm_eval=False,  # GroupNorm(1): no batch statistics to keep
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),  # converted on load
    neck=dict(in_channels=[64, 128, 320, 512]))
