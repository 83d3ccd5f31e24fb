# Mask2Former, PyramidTNT-S, ADE20K 512x512, 160k iterations, 8 GPUs x 2 images: Swin-T's
# recipe (mmseg's mask2former_swin-t_8xb2-160k_ade20k-512x512.py).
# Data: data/ade/ADEChallengeData2016/{images,annotations}/{training,validation}
_base_ = ['mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py', './_ptnt_s_backbone.py']
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

model = dict(backbone=dict(_base_.ptnt_s_backbone, _delete_=True, drop_path_rate=0.3),
             decode_head=dict(in_channels=_base_.ptnt_s_channels))
# Swin-T's per-parameter settings in PyramidTNT-S's names: the backbone at 0.1x the rate (inherited
# 'backbone' key), its norms and position tables also without weight decay.
optim_wrapper = dict(paramwise_cfg=dict(
    custom_keys={k: dict(lr_mult=0.1, decay_mult=0.) for k in _base_.ptnt_s_no_decay}))
