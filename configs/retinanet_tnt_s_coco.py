# RetinaNet, TNT-S (23.8M), COCO 2017, 1x schedule, 8 GPUs x 2 images.
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
_base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

# The official TNT-S weights (81.5 top-1), converted on load.
checkpoint = ('https://github.com/huawei-noah/Efficient-AI-Backbones/releases/download/tnt/'
              'tnt_s_81.5.pth.tar')
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhvit.TNT',  # always the scoped name: mmpretrain owns a plain `TNT`
        arch='small',
        out_indices=(1, 2, 3),  # the stride-4 branch is not built: no unused parameters
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),
    neck=dict(in_channels=[384, 384, 384], start_level=0, num_outs=5))

# AdamW lr 1e-4, weight decay 1e-4 (PVT's RetinaNet recipe); no decay on norms, position
# embeddings and the class token.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    paramwise_cfg=dict(norm_decay_mult=0., custom_keys={'pos_embed': dict(decay_mult=0.),
                                                        'cls_token': dict(decay_mult=0.)}))
auto_scale_lr = dict(enable=False, base_batch_size=16)
