# Ablation (docs/quickstart_results.md, HAT-Net): hatnet-q with BatchNorm in place of the published
# GroupNorm(1, C) everywhere (stem, IRBs, downsamples), as TransCNN-q; nothing else changed.
_base_ = '../classifier_hatnet-q_20e_shapes.py'
model = dict(backbone=dict(norm_cfg=dict(type='BN', requires_grad=True)))
work_dir = './work_dirs/classifier_hatnet-q-bn_20e_shapes'
