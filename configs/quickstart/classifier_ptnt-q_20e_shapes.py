# Quickstart: ImageClassifier with a small PyramidTNT (a quarter-width PyramidTNT-S), from
# scratch on the bundled shapes data (CPU).
_base_ = './_classifier_shapes.py'
model = dict(backbone={{_base_.backbones_c5.ptnt}},
             head=dict(in_channels={{_base_.channels_c5.ptnt}}))
work_dir = './work_dirs/classifier_ptnt-q_20e_shapes'
