# Cascade Mask R-CNN, PyramidTNT-S, COCO 2017, 3x schedule with multi-scale crops, 8 GPUs x 2
# images: Swin-T's 3x recipe (configs/_cascade-mask-rcnn_fpn_ms-crop-3x_coco.py).
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = ['./_cascade-mask-rcnn_fpn_ms-crop-3x_coco.py', './_ptnt_s_backbone.py']
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

model = dict(backbone=dict(_base_.ptnt_s_backbone, _delete_=True, drop_path_rate=0.2),
             neck=dict(in_channels=_base_.ptnt_s_channels))
# Swin-T's no-decay keys (norms, position tables) in PyramidTNT-S's names
optim_wrapper = dict(paramwise_cfg=dict(
    custom_keys={k: dict(decay_mult=0.) for k in _base_.ptnt_s_no_decay}))
