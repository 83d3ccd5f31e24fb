# Ablation (docs/quickstart_results.md, TNT): the Mask R-CNN recipe with norms where ViTDet has
# them: GroupNorm in the FPN, a 4-conv + 1-fc box head and the mask head with GroupNorm.
_base_ = '../mask-rcnn_tnt-q_16e_shapes.py'
gn = dict(type='GN', num_groups=16, requires_grad=True)
model = dict(
    neck=dict(norm_cfg=gn),
    roi_head=dict(
        bbox_head=dict(type='Shared4Conv1FCBBoxHead', conv_out_channels=64, norm_cfg=gn),
        mask_head=dict(norm_cfg=gn)))
work_dir = './work_dirs/mask-rcnn_tnt-q-gn_16e_shapes'
