# UperNet, TNT-S (23.8M), ADE20K 512x512, 160k iterations, 8 GPUs x 2 images.
# Data: data/ade/ADEChallengeData2016/{images,annotations}/{training,validation}
_base_ = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

checkpoint = ('https://github.com/huawei-noah/Efficient-AI-Backbones/releases/download/tnt/'
              'tnt_s_81.5.pth.tar')
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhvit.TNT',
        arch='small',
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),
    decode_head=dict(in_channels=[384, 384, 384, 384]),
    auxiliary_head=dict(in_channels=384))

# Swin's UperNet recipe (AdamW lr 6e-5, weight decay 0.01, warm-up then poly), inherited;
# no decay on norms, position embeddings and the class token.
optim_wrapper = dict(paramwise_cfg=dict(
    _delete_=True, norm_decay_mult=0., custom_keys={'pos_embed': dict(decay_mult=0.),
                                                        'cls_token': dict(decay_mult=0.)}))
auto_scale_lr = dict(enable=False, base_batch_size=16)
