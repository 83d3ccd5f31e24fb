# The bundled shapes dataset (tools/dataset_converters/make_shapes_coco.py) in the COCO layout:
# data/shapes/{train,val}/*.png, data/shapes/annotations/instances_{train,val}.json
_base_ = 'mmdet::_base_/datasets/coco_detection.py'

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
