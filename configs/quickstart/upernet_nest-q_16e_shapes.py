# Quickstart: UperNet with a small NesT, initialised from its classifier quickstart
# (classifier_*_20e_shapes.py), on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones_from_classifier.nest}},
             decode_head=dict(in_channels={{_base_.channels.nest}}),
             auxiliary_head=dict(in_channels={{_base_.channels_c4.nest}}))
work_dir = './work_dirs/upernet_nest-q_16e_shapes'
