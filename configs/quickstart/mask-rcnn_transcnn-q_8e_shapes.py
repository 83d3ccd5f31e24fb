# Quickstart: Mask R-CNN with a small TransCNN, trained from scratch on the bundled shapes data on CPU.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    './_shapes_cpu.py',
]
channels = 64
model = dict(
    data_preprocessor=dict(pad_size_divisor=32),
    backbone=dict(_delete_=True, type='mmhvit.TransCNN', arch={{_base_.transcnn_q}}, drop_path_rate=0.),
    neck=dict(in_channels=[32, 64, 128, 256], out_channels=channels),
    rpn_head=dict(in_channels=channels, feat_channels=channels),
    roi_head=dict(
        # a fixed 2x2 sampling grid: mmcv's CPU RoIAlign dominates the step with adaptive sampling
        bbox_roi_extractor=dict(out_channels=channels, roi_layer=dict(sampling_ratio=2)),
        bbox_head=dict(in_channels=channels, fc_out_channels=256, num_classes=3),
        mask_roi_extractor=dict(out_channels=channels, roi_layer=dict(sampling_ratio=2)),
        mask_head=dict(in_channels=channels, conv_out_channels=channels, num_classes=3)),
    # at most 5 objects per image: fewer proposals and sampled RoIs keep the CPU step short
    train_cfg=dict(rpn_proposal=dict(nms_pre=1000, max_per_img=300),
                   rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=300)))

_mask_pipeline = dict(type='LoadAnnotations', with_bbox=True, with_mask=True)
train_pipeline = [
    dict(type='LoadImageFromFile'), _mask_pipeline,
    dict(type='Resize', scale={{_base_.image_scale}}, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale={{_base_.image_scale}}, keep_ratio=True), _mask_pipeline,
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(metric=['bbox', 'segm'])
test_evaluator = val_evaluator

train_cfg = dict(max_epochs=8, val_interval=8)
optim_wrapper = dict(optimizer=dict(lr=1.5e-3))
work_dir = './work_dirs/mask-rcnn_transcnn-q_8e_shapes'
