# Quickstart: RetinaNet with a small TNT, from scratch on the bundled shapes data (CPU).
_base_ = './_retinanet_shapes.py'
model = dict(backbone={{_base_.backbones_c3_c5.tnt}},
             neck=dict(in_channels={{_base_.channels_c3_c5.tnt}}))
work_dir = './work_dirs/retinanet_tnt-q_16e_shapes'
