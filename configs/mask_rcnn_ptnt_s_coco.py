# Mask R-CNN, PyramidTNT-S (32.0M), COCO 2017, 1x schedule, 8 GPUs x 2 images; the backbone as in
# the paper's detection set-up (each stage's map upsampled 2x to strides 4-32).
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', './_ptnt_s_backbone.py']
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

model = dict(backbone={{_base_.ptnt_s_backbone}}, neck=dict(in_channels=[128, 256, 512, 512]))

# AdamW lr 1e-4, weight decay 0.05 (Swin's Mask R-CNN recipe, as the other families' configs).
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.05),
    paramwise_cfg={{_base_.ptnt_paramwise_cfg}})
auto_scale_lr = dict(enable=False, base_batch_size=16)
