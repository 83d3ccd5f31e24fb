# Quickstart: UperNet with a quarter-width TransCNN, initialised from its classifier quickstart
# (classifier_*_20e_shapes.py), on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones_from_classifier.transcnn}},
             decode_head=dict(in_channels={{_base_.channels.transcnn}}),
             auxiliary_head=dict(in_channels={{_base_.channels_c4.transcnn}}))
# TransCNN takes half the recipe's peak learning rate (2e-3): at the shared rate its loss climbs
# back from 0.19 to 0.31 in epochs 3-8 and ends at 0.14 (mIoU 0.506); at half it falls every
# epoch to 0.065 (mIoU 0.749; both before the auxiliary head, which lifts the half rate to 0.807;
# docs/quickstart_results.md, 'The UperNet recipe: 16 epochs').
optim_wrapper = dict(optimizer=dict(lr=1e-3))
work_dir = './work_dirs/upernet_transcnn-q_16e_shapes'
