# Mask R-CNN, NesT-T (17M), COCO 2017, 1x schedule, 8 GPUs x 2 images.
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

checkpoint = ('https://github.com/rwightman/pytorch-image-models/releases/download/'
              'v0.1-vt3p-weights/jx_nest_tiny-e3428fb9.pth')
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhvit.NesT',
        arch='tiny',
        drop_path_rate=0.2,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),
    neck=dict(in_channels=[96, 192, 384, 768]))

# AdamW lr 1e-4, weight decay 0.05 (Swin's Mask R-CNN recipe); no decay on norms and position
# embeddings.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0., custom_keys={'pos_embed': dict(decay_mult=0.)}))
auto_scale_lr = dict(enable=False, base_batch_size=16)
