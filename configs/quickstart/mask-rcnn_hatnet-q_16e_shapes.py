# Quickstart: Mask R-CNN with a half-width HAT-Net-Tiny, from scratch on the bundled shapes data
# (CPU).
_base_ = './_mask-rcnn_shapes.py'
model = dict(backbone={{_base_.backbones.hatnet}},
             neck=dict(in_channels={{_base_.channels.hatnet}}))
work_dir = './work_dirs/mask-rcnn_hatnet-q_16e_shapes'
