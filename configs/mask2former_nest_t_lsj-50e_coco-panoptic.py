# Mask2Former, NesT-T, COCO 2017 panoptic, 50 epochs, large-scale jitter, 8 GPUs x 2 images:
# Swin-T's recipe (mmdet's mask2former_swin-t-p4-w7-224_8xb2-lsj-50e_coco-panoptic.py).
# Data: data/coco/{train2017,val2017}/, data/coco/annotations/panoptic_{train,val}2017{.json,/}
# and instances_val2017.json (the instance metric)
_base_ = [
    'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco-panoptic.py',
    './_nest_t_backbone.py'
]
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

model = dict(backbone=dict(_base_.nest_t_backbone, _delete_=True, drop_path_rate=0.3),
             panoptic_head=dict(in_channels=_base_.nest_t_channels))
# Swin-T's per-parameter settings in NesT-T's names: the backbone at 0.1x the rate (inherited
# 'backbone' key), its norms and position tables also without weight decay.
optim_wrapper = dict(paramwise_cfg=dict(
    custom_keys={k: dict(lr_mult=0.1, decay_mult=0.) for k in _base_.nest_t_no_decay}))
