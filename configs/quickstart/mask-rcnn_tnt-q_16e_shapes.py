# Quickstart: Mask R-CNN with a small TNT, from scratch on the bundled shapes data (CPU).
_base_ = './_mask-rcnn_shapes.py'
model = dict(backbone={{_base_.backbones.tnt}},
             neck=dict(in_channels={{_base_.channels.tnt}}))
work_dir = './work_dirs/mask-rcnn_tnt-q_16e_shapes'
