# Quickstart: UperNet with a small TNT, initialised from its classifier quickstart
# (classifier_*_20e_shapes.py), on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones_from_classifier.tnt}},
             decode_head=dict(in_channels={{_base_.channels.tnt}}),
             auxiliary_head=dict(in_channels={{_base_.channels_c4.tnt}}))
work_dir = './work_dirs/upernet_tnt-q_16e_shapes'
