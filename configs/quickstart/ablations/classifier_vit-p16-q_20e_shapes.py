# Ablation (docs/quickstart_results.md, TNT): MMPretrain's own plain ViT at tnt-q's size (4 blocks,
# 128 wide, 16 x 16 patches) in the classifier quickstart recipe: does a TNT fail where any
# isotropic 16-px-patch transformer fails?
_base_ = '../_classifier_shapes.py'
model = dict(
    backbone=dict(_delete_=True, type='VisionTransformer',
                  arch=dict(embed_dims=128, num_layers=4, num_heads=4, feedforward_channels=512),
                  img_size=96, patch_size=16, out_type='avg_featmap'),
    neck=None, head=dict(in_channels=128))
work_dir = './work_dirs/classifier_vit-p16-q_20e_shapes'
