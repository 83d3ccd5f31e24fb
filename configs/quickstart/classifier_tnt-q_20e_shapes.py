# Quickstart: ImageClassifier with a small TNT, from scratch on the bundled shapes data (CPU).
_base_ = './_classifier_shapes.py'
model = dict(backbone={{_base_.backbones_c5.tnt}},
             head=dict(in_channels={{_base_.channels_c5.tnt}}))
work_dir = './work_dirs/classifier_tnt-q_20e_shapes'
