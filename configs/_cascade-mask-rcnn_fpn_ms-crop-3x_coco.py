# Cascade Mask R-CNN with FPN, COCO 2017, 3x schedule, 8 GPUs x 2 images: mmdet's
# cascade-mask-rcnn_r50_fpn_ms-3x_coco.py with Swin's 3x recipe (mmdet's
# mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py; mmdet ships no Swin Cascade config): DETR's
# multi-scale resize-and-crop augmentation, AdamW lr 1e-4, weight decay 0.05, 1000 warm-up
# iterations. The family configs add their backbone (drop path 0.2, as Swin-T's) and Swin's
# no-decay keys in their names.
_base_ = 'mmdet::cascade_rcnn/cascade-mask-rcnn_r50_fpn_ms-3x_coco.py'

_scales = [(480, 1333), (512, 1333), (544, 1333), (576, 1333), (608, 1333), (640, 1333),
           (672, 1333), (704, 1333), (736, 1333), (768, 1333), (800, 1333)]
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomChoice', transforms=[
        [dict(type='RandomChoiceResize', scales=_scales, keep_ratio=True)],
        [dict(type='RandomChoiceResize', scales=[(400, 1333), (500, 1333), (600, 1333)],
              keep_ratio=True),
         dict(type='RandomCrop', crop_type='absolute_range', crop_size=(384, 600),
              allow_negative_crop=True),
         dict(type='RandomChoiceResize', scales=_scales, keep_ratio=True)]]),
    dict(type='PackDetInputs')
]
# mmdet's 3x: 12 epochs of the train set repeated 3 times, the steps at 9 and 11 (Swin's 27 and 33
# of 36 epochs)
train_dataloader = dict(dataset=dict(dataset=dict(pipeline=train_pipeline)))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=12, by_epoch=True, milestones=[9, 11], gamma=0.1)
]
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05))
auto_scale_lr = dict(enable=False, base_batch_size=16)
