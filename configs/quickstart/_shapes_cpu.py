# What the quickstart detectors share: the bundled shapes dataset (made by
# tools/dataset_converters/make_shapes_coco.py in the COCO layout: data/shapes/{train,val}/*.png,
# data/shapes/annotations/instances_{train,val}.json), a CPU-sized TransCNN and a from-scratch
# AdamW schedule. A detector config adds its model base, train_cfg (epochs) and learning rate.
_base_ = [
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

# A quarter-width TransCNN-Tiny: same stages, grids and pool ratios, CPU-sized.
transcnn_q = dict(embed_dims=[32, 64, 128, 256], depths=[1, 1, 2, 1], num_heads=[1, 1, 2, 4],
                  expansions=[4, 4, 4, 4], grid_sizes=[8, 8, 8, 1], ds_ratios=[8, 4, 2, 1])

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
                 ann_file='annotations/instances_train.json', data_prefix=dict(img='train/'),
                 filter_cfg=dict(filter_empty_gt=True, min_size=8), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8,
    num_workers=1,
    dataset=dict(data_root=data_root, metainfo=metainfo,
                 ann_file='annotations/instances_val.json', data_prefix=dict(img='val/'),
                 pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator

# Warm-up, then cosine decay over whatever train_cfg.max_epochs the detector config sets (MMEngine
# ends a scheduler without `end` at the last epoch; T_max defaults to its length).
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', eta_min_ratio=0.05, by_epoch=True, begin=0,
         convert_to_iter_based=True)
]
optim_wrapper = dict(
    _delete_=True, type='OptimWrapper', clip_grad=dict(max_norm=10.),
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.))
# only the last checkpoint (save_last), logs every 10 iterations
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(interval=1000, max_keep_ckpts=1))
auto_scale_lr = dict(base_batch_size=8)
