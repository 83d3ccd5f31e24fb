# Quickstart: Mask R-CNN with a small PyramidTNT (a quarter-width PyramidTNT-S), from scratch on
# the bundled shapes data (CPU).
_base_ = './_mask-rcnn_shapes.py'
model = dict(backbone={{_base_.backbones.ptnt}},
             neck=dict(in_channels={{_base_.channels.ptnt}}))
work_dir = './work_dirs/mask-rcnn_ptnt-q_16e_shapes'
