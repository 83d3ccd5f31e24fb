# Quickstart: RetinaNet with a small PyramidTNT (a quarter-width PyramidTNT-S), from scratch on
# the bundled shapes data (CPU).
_base_ = './_retinanet_shapes.py'
model = dict(backbone={{_base_.backbones_c3_c5.ptnt}},
             neck=dict(in_channels={{_base_.channels_c3_c5.ptnt}}))
work_dir = './work_dirs/retinanet_ptnt-q_16e_shapes'
