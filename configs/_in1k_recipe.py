# What the ImageNet-1k configs share: the DeiT / PVT recipe that the official TransCNN, HAT-Net and
# TNT trainings follow (NesT overrides its head, mixing and schedule). 300 epochs of AdamW, lr 1e-3
# at batch 1024 and weight decay 0.05 (none on norms and biases), from the Swin schedule base;
# 5 warm-up epochs, cosine to 1e-5; an ImageClassifier with global pooling and a linear head,
# label smoothing 0.1, mixup 0.8 / cutmix 1.0. A config adds the dataset base of its resolution
# (mmpretrain's imagenet_bs64_swin_{224,256}.py), 128 images per GPU and its backbone.
_base_ = [
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

model = dict(
    type='ImageClassifier',
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.)),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5)
]
# The recipes' learning rates are for a batch of 1024 = 8 GPUs x 128 (base_batch_size). With fewer
# GPUs keep that batch by accumulating gradients: GPUs x batch_size x accumulative_counts = 1024,
# e.g. 2 GPUs: --cfg-options optim_wrapper.accumulative_counts=4 (same lr, same schedule in
# epochs; tests/test_distributed.py checks that 2 x batch 2 accumulated is one step of batch 4).
# Or train the smaller batch with the lr scaled linearly: tools/train.py --auto-scale-lr (MMEngine
# counts GPUs x batch_size only, so do not combine it with accumulative_counts).
auto_scale_lr = dict(base_batch_size=1024)
