# TNT-S on ImageNet-1k with the official recipe (Han et al., NeurIPS 2021; DeiT-style): 300 epochs,
# AdamW lr 1e-3 at batch 1024 (8 GPUs x 128), 5 warm-up epochs, drop path 0.1, RandAugment, random
# erasing, mixup 0.8 / cutmix 1.0, label smoothing 0.1, EMA, mean = std = 0.5.
# Official / timm weights: python tools/model_converters/tnt2mmhvit.py SRC DST (81.5 top-1).
_base_ = ['mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py', './_in1k_recipe.py']

model = dict(
    # 'mmhvit.TNT': a plain 'TNT' would build mmpretrain's own class under the mmpretrain scope.
    backbone=dict(type='mmhvit.TNT', arch='small', out_type='cls_token', out_indices=(3, ),
                  drop_path_rate=0.1),
    neck=None,  # the class token
    head=dict(in_channels=384))

data_preprocessor = dict(mean=[127.5, 127.5, 127.5], std=[127.5, 127.5, 127.5], to_rgb=True)

# Evaluation at crop ratio 0.9, as the official model was measured (248 -> 224).
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=248, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=128)
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(
    optimizer=dict(lr=1e-3),
    paramwise_cfg=dict(custom_keys={
        '.cls_token': dict(decay_mult=0.0),
        'pos_embed': dict(decay_mult=0.0),  # the sentence and the word position embeddings
    }))
custom_hooks = [dict(type='EMAHook', momentum=4e-5, priority='ABOVE_NORMAL')]
