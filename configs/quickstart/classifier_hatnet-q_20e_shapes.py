# Quickstart: ImageClassifier with a half-width HAT-Net-Tiny, from scratch on the bundled shapes
# data (CPU).
_base_ = './_classifier_shapes.py'
model = dict(backbone={{_base_.backbones_c5.hatnet}},
             head=dict(in_channels={{_base_.channels_c5.hatnet}}))
work_dir = './work_dirs/classifier_hatnet-q_20e_shapes'
