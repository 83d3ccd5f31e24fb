# Quickstart: Mask2Former with a quarter-width TransCNN, from scratch on the bundled shapes data
# (CPU).
_base_ = './_mask2former_shapes.py'
model = dict(backbone={{_base_.backbones.transcnn}},
             panoptic_head=dict(in_channels={{_base_.channels.transcnn}}))
work_dir = './work_dirs/mask2former_transcnn-q_12e_shapes'
