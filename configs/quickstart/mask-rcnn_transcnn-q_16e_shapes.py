# Quickstart: Mask R-CNN with a quarter-width TransCNN, from scratch on the bundled shapes data
# (CPU).
_base_ = './_mask-rcnn_shapes.py'
model = dict(backbone={{_base_.backbones.transcnn}},
             neck=dict(in_channels={{_base_.channels.transcnn}}))
work_dir = './work_dirs/mask-rcnn_transcnn-q_16e_shapes'
