# Mask R-CNN on the shapes data, trained from scratch on the CPU: the recipe of every Mask R-CNN
# quickstart (16 epochs, AdamW lr 1.5e-3, batch 8). A config sets model.backbone and
# neck.in_channels from the tables of _shapes_base.py (all four strides: backbones, channels).
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    './_shapes_det.py',
]
neck_channels = 64
model = dict(
    data_preprocessor=dict(pad_size_divisor=32),
    neck=dict(out_channels=neck_channels),
    rpn_head=dict(in_channels=neck_channels, feat_channels=neck_channels),
    roi_head=dict(
        # a fixed 2x2 sampling grid: mmcv's CPU RoIAlign dominates the step with adaptive sampling
        bbox_roi_extractor=dict(out_channels=neck_channels, roi_layer=dict(sampling_ratio=2)),
        bbox_head=dict(in_channels=neck_channels, fc_out_channels=256, num_classes=3),
        mask_roi_extractor=dict(out_channels=neck_channels, roi_layer=dict(sampling_ratio=2)),
        mask_head=dict(in_channels=neck_channels, conv_out_channels=neck_channels, num_classes=3)),
    # at most 5 objects per image: fewer proposals and sampled RoIs keep the CPU step short
    train_cfg=dict(rpn_proposal=dict(nms_pre=1000, max_per_img=300),
                   rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=300)))

_load_masks = dict(type='LoadAnnotations', with_bbox=True, with_mask=True)
train_pipeline = [
    dict(type='LoadImageFromFile'), _load_masks,
    dict(type='Resize', scale={{_base_.image_scale}}, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale={{_base_.image_scale}}, keep_ratio=True), _load_masks,
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(metric=['bbox', 'segm'])
test_evaluator = val_evaluator

# 16 epochs, not 8: at 8 every backbone was still fitting, the isotropic TNT most (its segm mAP
# 0.30 at 8 epochs, 0.45 at 16; docs/quickstart_results.md, 'TNT: causes, measured').
train_cfg = dict(max_epochs=16)
optim_wrapper = dict(optimizer=dict(lr=1.5e-3))
