# UperNet, HAT-Net-Small (25.7M), ADE20K 512x512, 160k iterations, 8 GPUs x 2 images.
# Data: data/ade/ADEChallengeData2016/{images,annotations}/{training,validation}
# The TransCNN recipe (HAT-Net's authors follow the same PVT recipes) with the HAT-Net backbone.
_base_ = './upernet_transcnn_b_ade20k.py'

checkpoint = 'https://github.com/yun-liu/HAT-Net/releases/download/v2.0/HAT-Net_Small.pth'
model = dict(
    backbone=dict(
        type='mmhvit.HATNet',
        arch='small',
        norm_cfg=None,  # its own GroupNorm(1), per image: no SyncBN needed
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),  # converted on load
    decode_head=dict(in_channels=[64, 128, 320, 512]),
    auxiliary_head=dict(in_channels=320))
