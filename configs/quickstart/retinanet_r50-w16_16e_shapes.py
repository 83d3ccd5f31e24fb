# Quickstart: RetinaNet with the library's ResNet-50 at a quarter of its width (base_channels=16:
# bottleneck outputs 64/128/256/512 channels, as ResNet-18's), from scratch on the bundled shapes
# data (CPU). The baseline of the H-MHSA plugin pair (retinanet_r50-w16-hmhsa_16e_shapes.py):
# MMDet's ResNet takes plugins only in its Bottleneck blocks (BasicBlock asserts `plugins is None`),
# so the pair cannot be ResNet-18.
_base_ = './_retinanet_shapes.py'
model = dict(
    backbone=dict(
        _delete_=True, type='ResNet', depth=50, base_channels=16, out_indices=(1, 2, 3),
        frozen_stages=-1, norm_eval=False, norm_cfg=dict(type='BN', requires_grad=True),
        init_cfg=None),
    neck=dict(in_channels=[128, 256, 512]))
work_dir = './work_dirs/retinanet_r50-w16_16e_shapes'
