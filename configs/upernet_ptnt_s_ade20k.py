# UperNet, PyramidTNT-S (32.0M), ADE20K 512x512, 160k iterations, 8 GPUs x 2 images; the backbone's
# four maps at strides 4-32 (each stage upsampled 2x, as the paper's detection set-up).
# Data: data/ade/ADEChallengeData2016/{images,annotations}/{training,validation}
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
    './_ptnt_s_backbone.py'
]
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

model = dict(
    backbone={{_base_.ptnt_s_backbone}},
    decode_head=dict(in_channels=[128, 256, 512, 512]),
    auxiliary_head=dict(in_channels=512))

# Swin's UperNet recipe (AdamW lr 6e-5, weight decay 0.01, warm-up then poly), inherited; no
# weight decay on norms and the position embeddings.
optim_wrapper = dict(paramwise_cfg=dict(
    _delete_=True, norm_decay_mult=0., custom_keys={'pos_embed': dict(decay_mult=0.)}))
auto_scale_lr = dict(enable=False, base_batch_size=16)
