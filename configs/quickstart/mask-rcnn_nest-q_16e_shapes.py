# Quickstart: Mask R-CNN with a small NesT, from scratch on the bundled shapes data (CPU).
_base_ = './_mask-rcnn_shapes.py'
model = dict(backbone={{_base_.backbones.nest}},
             neck=dict(in_channels={{_base_.channels.nest}}))
work_dir = './work_dirs/mask-rcnn_nest-q_16e_shapes'
