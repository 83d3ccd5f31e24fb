# DINO (4 scales), NesT-T, COCO 2017, 12 epochs, 8 GPUs x 2 images: mmdet's
# dino-4scale_r50 recipe (AdamW lr 1e-4, backbone at 0.1x, gradient clipping at 0.1) with
# Swin's backbone settings (dino-5scale_swin-l: drop path 0.2, no other per-parameter key).
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = ['mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py', './_nest_t_backbone.py']
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

# strides 8-32, as ResNet-50's last three stages in the recipe
model = dict(
    backbone=dict(_base_.nest_t_backbone, _delete_=True, out_indices=(1, 2, 3),
                  drop_path_rate=0.2),
    neck=dict(in_channels=_base_.nest_t_channels[1:]))
