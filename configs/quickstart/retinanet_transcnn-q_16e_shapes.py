# Quickstart: RetinaNet with a quarter-width TransCNN, from scratch on the bundled shapes data
# (CPU).
_base_ = './_retinanet_shapes.py'
model = dict(backbone={{_base_.backbones_c3_c5.transcnn}},
             neck=dict(in_channels={{_base_.channels_c3_c5.transcnn}}))
work_dir = './work_dirs/retinanet_transcnn-q_16e_shapes'
