# RetinaNet, HAT-Net-Small (25.7M), COCO 2017, 1x schedule, 8 GPUs x 2 images.
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

checkpoint = 'https://github.com/yun-liu/HAT-Net/releases/download/v2.0/HAT-Net_Small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhvit.HATNet',
        arch='small',
        out_indices=(1, 2, 3),  # only what the neck uses: no unused parameters under DDP
        drop_path_rate=0.1,
        # GroupNorm(1) everywhere: no batch statistics, so nothing to freeze at 2 images per GPU.
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),  # converted on load
    neck=dict(in_channels=[128, 320, 512], start_level=0, num_outs=5))

# AdamW, lr 1e-4, weight decay 1e-4: the PVT RetinaNet recipe HAT-Net follows.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    paramwise_cfg=dict(norm_decay_mult=0.))
auto_scale_lr = dict(enable=False, base_batch_size=16)
