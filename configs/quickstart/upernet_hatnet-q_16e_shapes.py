# Quickstart: UperNet with a half-width HAT-Net-Tiny, initialised from its classifier quickstart
# (classifier_*_20e_shapes.py), on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones_from_classifier.hatnet}},
             decode_head=dict(in_channels={{_base_.channels.hatnet}}),
             auxiliary_head=dict(in_channels={{_base_.channels_c4.hatnet}}))
work_dir = './work_dirs/upernet_hatnet-q_16e_shapes'
