# HAT-Net-Small (25.7M) on ImageNet-1k at 224 x 224 with the official recipe ("exactly the code and
# training settings of PVT", yun-liu/HAT-Net README): 300 epochs, AdamW lr 1e-3 at batch 1024
# (8 GPUs x 128, i.e. 5e-4 x batch / 512) and weight decay 0.05 (none on norms and biases) from the
# Swin schedule base, 5 warm-up epochs, cosine to 1e-5, drop path 0.1, RandAugment, random erasing,
# mixup 0.8 / cutmix 1.0, label smoothing 0.1, no gradient clipping. The official head is
# GAP - Dropout(0.2) - Linear with no norm before it; LinearClsHead lacks the dropout (no effect on
# evaluation).
# Other archs: backbone.arch='tiny'|'medium'|'large' with head.in_channels=384|512|640.
# Official weights: python tools/model_converters/hatnet2mmhvit.py HAT-Net_Small.pth out.pth
_base_ = ['mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py', './_in1k_recipe.py']

model = dict(
    backbone=dict(type='mmhvit.HATNet', arch='small', out_indices=(3, ), drop_path_rate=0.1),
    head=dict(in_channels=512))
train_dataloader = dict(batch_size=128)
