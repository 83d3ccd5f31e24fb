# Quickstart: UperNet with the library's ResNet-18 (the baseline), initialised from its
# classifier quickstart (classifier_*_20e_shapes.py), on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones_from_classifier.r18}},
             decode_head=dict(in_channels={{_base_.channels.r18}}),
             auxiliary_head=dict(in_channels={{_base_.channels_c4.r18}}))
work_dir = './work_dirs/upernet_r18_16e_shapes'
