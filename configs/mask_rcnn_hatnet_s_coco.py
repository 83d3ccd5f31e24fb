# Mask R-CNN, HAT-Net-Small (25.7M), COCO 2017, 1x schedule, 8 GPUs x 2 images.
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

checkpoint = 'https://github.com/yun-liu/HAT-Net/releases/download/v2.0/HAT-Net_Small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhvit.HATNet',
        arch='small',
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),  # GroupNorm: no norm_eval needed
    neck=dict(in_channels=[64, 128, 320, 512]))

# AdamW, lr 1e-4, weight decay 1e-4 (the PVT recipe HAT-Net follows).
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    paramwise_cfg=dict(norm_decay_mult=0.))
auto_scale_lr = dict(enable=False, base_batch_size=16)
