# TransCNN-B (= Small, 26.5M) on ImageNet-1k at 256 x 256 with the official recipe (the PVT/DeiT one
# that yun-liu/TransCNN follows): 300 epochs, AdamW lr 1e-3 at batch 1024 (8 GPUs x 128, i.e.
# 5e-4 x batch / 512) and weight decay 0.05 (none on norms and biases) from the Swin schedule base,
# 5 warm-up epochs, cosine to 1e-5, drop path 0.1, RandAugment, random erasing, mixup 0.8 /
# cutmix 1.0, label smoothing 0.1, no gradient clipping. The official head has Dropout(0.2) before
# its Linear, which LinearClsHead lacks (no effect on evaluation).
# Other archs: backbone.arch='tiny'|'medium'|'large' with head.in_channels=512|640|768.
# Official weights: python tools/model_converters/transcnn2mmhvit.py TransCNN-Small.pth out.pth
_base_ = ['mmpretrain::_base_/datasets/imagenet_bs64_swin_256.py', './_in1k_recipe.py']

model = dict(
    backbone=dict(type='mmhvit.TransCNN', arch='base', out_indices=(3, ), drop_path_rate=0.1),
    head=dict(in_channels=512))
train_dataloader = dict(batch_size=128)
