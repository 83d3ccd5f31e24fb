# Quickstart: Mask R-CNN with the library's ResNet-18 (the baseline), from scratch on the bundled
# shapes data (CPU).
_base_ = './_mask-rcnn_shapes.py'
model = dict(backbone={{_base_.backbones.r18}},
             neck=dict(in_channels={{_base_.channels.r18}}))
work_dir = './work_dirs/mask-rcnn_r18_16e_shapes'
