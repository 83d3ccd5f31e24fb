# UperNet, HAT-Net-Small (25.7M), ADE20K 512x512, 160k iterations, 8 GPUs x 2 images.
# Data: data/ade/ADEChallengeData2016/{images,annotations}/{training,validation}
_base_ = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

checkpoint = 'https://github.com/yun-liu/HAT-Net/releases/download/v2.0/HAT-Net_Small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhvit.HATNet',
        arch='small',
        drop_path_rate=0.1,
        # The backbone's own GroupNorm(1) (its weights' norm): per-image, no SyncBN needed.
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),
    decode_head=dict(in_channels=[64, 128, 320, 512]),
    auxiliary_head=dict(in_channels=320))

# Swin's UperNet recipe (AdamW lr 6e-5, weight decay 0.01, linear warm-up then poly), inherited;
# no weight decay on norms.
optim_wrapper = dict(paramwise_cfg=dict(_delete_=True, norm_decay_mult=0.))
auto_scale_lr = dict(enable=False, base_batch_size=16)
