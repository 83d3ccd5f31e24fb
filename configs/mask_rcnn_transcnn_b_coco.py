# Mask R-CNN, TransCNN-B (= Small, 26.5M), COCO 2017, 1x schedule, 8 GPUs x 2 images.
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

checkpoint = 'https://github.com/yun-liu/TransCNN/releases/download/v1.0/TransCNN-Small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhvit.TransCNN',
        arch='base',
        drop_path_rate=0.1,
        norm_eval=True,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),
    neck=dict(in_channels=[64, 128, 256, 512]))

# AdamW, lr 1e-4, weight decay 1e-4 (the PVT recipe the TransCNN paper compares under).
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    paramwise_cfg=dict(norm_decay_mult=0.))
auto_scale_lr = dict(enable=False, base_batch_size=16)
