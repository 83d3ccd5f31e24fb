# Quickstart: RetinaNet with a half-width HAT-Net-Tiny, from scratch on the bundled shapes data
# (CPU).
_base_ = './_retinanet_shapes.py'
model = dict(backbone={{_base_.backbones_c3_c5.hatnet}},
             neck=dict(in_channels={{_base_.channels_c3_c5.hatnet}}))
work_dir = './work_dirs/retinanet_hatnet-q_16e_shapes'
