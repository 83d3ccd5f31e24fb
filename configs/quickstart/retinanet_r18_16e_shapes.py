# Quickstart: RetinaNet with the library's ResNet-18 (the baseline), from scratch on the bundled
# shapes data (CPU).
_base_ = './_retinanet_shapes.py'
model = dict(backbone={{_base_.backbones_c3_c5.r18}},
             neck=dict(in_channels={{_base_.channels_c3_c5.r18}}))
work_dir = './work_dirs/retinanet_r18_16e_shapes'
