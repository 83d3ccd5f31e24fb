# NesT-T on ImageNet-1k with the official recipe: AdamW lr 2.5e-4 at batch 1024 (16 x 64),
# weight decay 0.05 (not on position embeddings), 300 epochs with 20 warm-up, label smoothing 0.1,
# mixup 0.8, RandAugment and random erasing from the Swin data pipeline, no gradient clipping.
# NesT-S: backbone.arch='small'; NesT-B: arch='base' and head.in_channels=512 (sharded:
# nest_b_fsdp_in1k.py). Fewer GPUs than 16 x 64: optim_wrapper.accumulative_counts keeps the
# batch of 1024 (_in1k_recipe.py).
_base_ = ['mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py', './_in1k_recipe.py']

model = dict(
    # out_indices=(2,): the three NesT levels only (no stride-32 extra), final LN applied.
    backbone=dict(type='mmhvit.NesT', arch='tiny', out_indices=(2, ), final_norm=True,
                  drop_path_rate=0.2),  # the official NesT-T rate
    # LinearClsHead's own default init of the head, as the official code (not the recipe's)
    head=dict(in_channels=384, cal_acc=False,
              init_cfg=dict(_delete_=True, type='Normal', layer='Linear', std=0.01)),
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
        dict(type='Constant', layer='LayerNorm', val=1., bias=0.),
    ],
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8)]))

optim_wrapper = dict(
    optimizer=dict(lr=2.5e-4, weight_decay=0.05),
    clip_grad=None,
    paramwise_cfg=dict(
        _delete_=True, custom_keys={'.pos_embed': dict(decay_mult=0.)}))
# 20 warm-up epochs, then cosine decay to zero, as the official schedule
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=20, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=0., by_epoch=True, begin=20, end=300,
         convert_to_iter_based=True),
]
