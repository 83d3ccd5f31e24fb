# UperNet on the shapes data (MMSeg img_dir/ann_dir layout:
# data/shapes/{img_dir,ann_dir}/{train,val}, label 0 = background, 1..3 = circle, square,
# triangle) on the CPU: the recipe of every UperNet quickstart. A config sets model.backbone,
# decode_head.in_channels and auxiliary_head.in_channels from the tables of _shapes_base.py (all
# four strides: backbones_from_classifier, channels; the stride-16 map: channels_c4). The
# backbone starts from the same backbone's classifier quickstart, as ADE20K recipes start from
# ImageNet weights: from scratch, every backbone (ResNet-18 too) labels every shape as one class
# (docs/quickstart_results.md).
_base_ = [
    'mmseg::_base_/models/upernet_r50.py',
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_20k.py',  # its hooks; loop and optimiser replaced below
    './_shapes_base.py',
]
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

data_root = 'data/shapes/'
metainfo = dict(classes=('background', 'circle', 'square', 'triangle'),
                palette=[(0, 0, 0), (220, 20, 60), (0, 128, 255), (255, 200, 0)])
image_scale = (256, 256)
norm_cfg = dict(type='BN', requires_grad=True)  # one CPU process: no SyncBN
model = dict(
    # training batches are padded to 256 x 256 (labels with 255, ignored); test images keep
    # their own size
    data_preprocessor=dict(size=image_scale, test_cfg=None),
    pretrained=None,  # the backbone's init_cfg loads the classifier's weights
    decode_head=dict(channels=64, num_classes=4, norm_cfg=norm_cfg),
    # MMSeg's auxiliary FCN head on the stride-16 map (loss weight 0.4), 64 channels as the decode
    # head, as MMSeg's UperNet recipes have it: it adds 0.06-0.10 mIoU to TransCNN-q, TNT-q and
    # ResNet-18 (docs/quickstart_results.md, 'The UperNet recipe: MMSeg's auxiliary head')
    auxiliary_head=dict(channels=64, num_classes=4, norm_cfg=norm_cfg))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs')
]
_dataset = dict(type='BaseSegDataset', data_root=data_root, metainfo=metainfo,
                img_suffix='.png', seg_map_suffix='.png', reduce_zero_label=False)
train_dataloader = dict(
    batch_size=8, num_workers=1, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(**_dataset, pipeline=train_pipeline,
                 data_prefix=dict(img_path='img_dir/train', seg_map_path='ann_dir/train')))
val_dataloader = dict(
    batch_size=1, num_workers=1, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(**_dataset, data_prefix=dict(img_path='img_dir/val', seg_map_path='ann_dir/val'),
                 pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator

# validation only at the end, by tools/test.py. 16 epochs, not 8: at 8 every backbone was still
# fitting (NesT-q mIoU 0.718 at 8, 0.809 at 16; docs/quickstart_results.md), as Mask R-CNN's were.
train_cfg = dict(_delete_=True, type={{_base_.quickstart_train_loop}}, max_epochs=16,
                 val_interval=1000)
optim_wrapper = {{_base_.quickstart_optim_wrapper}}
param_scheduler = {{_base_.quickstart_param_scheduler}}
default_hooks = {{_base_.quickstart_hooks}}
log_processor = dict(by_epoch=True)
randomness = {{_base_.quickstart_randomness}}
auto_scale_lr = dict(enable=False, base_batch_size=8)
