# Quickstart: ImageClassifier with a small NesT, from scratch on the bundled shapes data (CPU).
_base_ = './_classifier_shapes.py'
model = dict(backbone={{_base_.backbones_c5.nest}},
             head=dict(in_channels={{_base_.channels_c5.nest}}))
work_dir = './work_dirs/classifier_nest-q_20e_shapes'
