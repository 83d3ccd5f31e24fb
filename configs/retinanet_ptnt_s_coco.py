# RetinaNet, PyramidTNT-S (32.0M), COCO 2017, 1x schedule, 8 GPUs x 2 images: the paper's set-up
# (each stage's map upsampled 2x to strides 4-32 for the FPN; 42.0 box AP reported).
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = ['mmdet::retinanet/retinanet_r50_fpn_1x_coco.py', './_ptnt_s_backbone.py']
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

model = dict(backbone={{_base_.ptnt_s_backbone_c3_c5}},
             neck=dict(in_channels=[256, 512, 512], start_level=0, num_outs=5))

# AdamW lr 1e-4, weight decay 1e-4 (PVT's RetinaNet recipe, as the other families' configs).
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    paramwise_cfg={{_base_.ptnt_paramwise_cfg}})
auto_scale_lr = dict(enable=False, base_batch_size=16)
