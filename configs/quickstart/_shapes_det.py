# The shapes scenes in the COCO layout for MMDetection (RetinaNet and Mask R-CNN quickstarts):
# data/shapes/img_dir/{train,val}/*.png and data/shapes/annotations/instances_{train,val}.json.
_base_ = [
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/default_runtime.py',
    'mmdet::_base_/schedules/schedule_1x.py',  # its loops; the optimiser is replaced below
    './_shapes_base.py',
]
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

data_root = 'data/shapes/'
metainfo = dict(classes=('circle', 'square', 'triangle'),
                palette=[(220, 20, 60), (0, 128, 255), (255, 200, 0)])
image_scale = (256, 256)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))
]
train_dataloader = dict(
    batch_size=8,
    num_workers=1,
    dataset=dict(data_root=data_root, metainfo=metainfo,
                 ann_file='annotations/instances_train.json',
                 data_prefix=dict(img='img_dir/train/'),
                 filter_cfg=dict(filter_empty_gt=True, min_size=8), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8,
    num_workers=1,
    dataset=dict(data_root=data_root, metainfo=metainfo,
                 ann_file='annotations/instances_val.json', data_prefix=dict(img='img_dir/val/'),
                 pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator

# validation only at the end, by tools/test.py (the task sets max_epochs)
train_cfg = dict(type={{_base_.quickstart_train_loop}}, val_interval=1000)
optim_wrapper = {{_base_.quickstart_optim_wrapper}}
param_scheduler = {{_base_.quickstart_param_scheduler}}
default_hooks = {{_base_.quickstart_hooks}}
randomness = {{_base_.quickstart_randomness}}
auto_scale_lr = dict(base_batch_size=8)
