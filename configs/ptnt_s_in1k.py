# PyramidTNT-S (32.0M) on ImageNet-1k at 256 x 256 with the official recipe (the PyramidTNT command
# of huawei-noah/Efficient-AI-Backbones tnt_pytorch/readme.md, timm's train.py): 300 epochs, AdamW
# lr 1e-3 at batch 1024 (8 GPUs x 128) and weight decay 0.05 (none on norms, biases and the
# position embeddings; the relative_pos biases decay, as timm's optimiser does there), 20 warm-up
# epochs from 1e-6, cosine to 1e-5, drop path 0.1, RandAugment, random erasing 0.25, mixup 0.8 /
# cutmix 1.0, label smoothing 0.1, repeated augmentation, EMA 0.99996, mean = std = 0.5.
# Other archs: backbone.arch='medium'|'base' with head.in_channels=768|1024; 'tiny' (320) was
# trained at 192: the imagenet_bs256_swin_192.py base and a 213 -> 192 test crop.
# Official weights: python tools/model_converters/ptnt2mmhvit.py SRC DST (82.0 top-1).
_base_ = ['mmpretrain::_base_/datasets/imagenet_bs64_swin_256.py', './_in1k_recipe.py']

model = dict(
    # 'raw': the stage-4 sentence map after the final LN; its mean and the linear head are the
    # official classifier.
    backbone=dict(type='mmhvit.PyramidTNT', arch='small', out_type='raw', out_indices=(3, ),
                  drop_path_rate=0.1),
    head=dict(in_channels=512))

data_preprocessor = dict(mean=[127.5, 127.5, 127.5], std=[127.5, 127.5, 127.5], to_rgb=True)

# Evaluation at crop ratio 0.9, bicubic, as the official model was measured (284 -> 256).
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=284, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=256),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=128, sampler=dict(type='RepeatAugSampler', shuffle=True))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(
    optimizer=dict(lr=1e-3),
    paramwise_cfg=dict(custom_keys={'pos_embed': dict(decay_mult=0.0)}))  # sentence and word
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=20, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=20)
]
custom_hooks = [dict(type='EMAHook', momentum=4e-5, priority='ABOVE_NORMAL')]
