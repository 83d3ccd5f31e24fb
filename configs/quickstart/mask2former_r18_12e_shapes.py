# Quickstart: Mask2Former with the library's ResNet-18 (the baseline), from scratch on the bundled
# shapes data (CPU).
_base_ = './_mask2former_shapes.py'
model = dict(backbone={{_base_.backbones.r18}},
             panoptic_head=dict(in_channels={{_base_.channels.r18}}))
work_dir = './work_dirs/mask2former_r18_12e_shapes'
