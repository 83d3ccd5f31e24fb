# Quickstart: UperNet with a small PyramidTNT (a quarter-width PyramidTNT-S), initialised from its
# classifier quickstart (classifier_*_20e_shapes.py), on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones_from_classifier.ptnt}},
             decode_head=dict(in_channels={{_base_.channels.ptnt}}),
             auxiliary_head=dict(in_channels={{_base_.channels_c4.ptnt}}))
work_dir = './work_dirs/upernet_ptnt-q_16e_shapes'
