# An MMPretrain ImageClassifier on the shapes crops (CustomDataset layout:
# data/shapes/crops/{train,val}/{circle,square,triangle,no_shape}/*.png, 64-96 px, balanced),
# trained from scratch on the CPU: the recipe of every classifier quickstart. A config sets
# model.backbone and head.in_channels from the tables of _shapes_base.py (the stride-32 map:
# backbones_c5, channels_c5), pooled globally as ImageNet classifiers do.
_base_ = [
    'mmpretrain::_base_/default_runtime.py',
    'mmpretrain::_base_/schedules/imagenet_bs256.py',  # its loops; the optimiser is replaced
    './_shapes_base.py',
]
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

data_root = 'data/shapes/crops'
# CustomDataset numbers the class folders alphabetically: the names follow that order
classes = ('circle', 'no_shape', 'square', 'triangle')
image_scale = (96, 96)
model = dict(
    type='ImageClassifier',
    backbone=dict(type='ResNet', depth=18),  # replaced by each config
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=len(classes),
              loss=dict(type='CrossEntropyLoss', loss_weight=1.0), topk=(1, )))
data_preprocessor = dict(
    num_classes=len(classes), mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
    to_rgb=True)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale),
    dict(type='PackInputs')
]
train_dataloader = dict(
    batch_size=32, num_workers=1, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type='CustomDataset', data_root=data_root, data_prefix='train',
                 metainfo=dict(classes=classes), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=64, num_workers=1, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='CustomDataset', data_root=data_root, data_prefix='val',
                 metainfo=dict(classes=classes), pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator

train_cfg = dict(_delete_=True, type={{_base_.quickstart_train_loop}}, max_epochs=20,
                 val_interval=1000)  # validation at the end, by tools/test.py
optim_wrapper = {{_base_.quickstart_optim_wrapper}}
param_scheduler = {{_base_.quickstart_param_scheduler}}
default_hooks = {{_base_.quickstart_hooks}}
randomness = {{_base_.quickstart_randomness}}
auto_scale_lr = dict(base_batch_size=32)
