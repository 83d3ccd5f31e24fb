# Quickstart: ImageClassifier with a quarter-width TransCNN, from scratch on the bundled shapes
# data (CPU).
_base_ = './_classifier_shapes.py'
model = dict(backbone={{_base_.backbones_c5.transcnn}},
             head=dict(in_channels={{_base_.channels_c5.transcnn}}))
work_dir = './work_dirs/classifier_transcnn-q_20e_shapes'
