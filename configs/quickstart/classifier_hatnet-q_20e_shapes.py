# Quickstart: ImageClassifier with a half-width HAT-Net-Tiny, from scratch on the bundled shapes
# data (CPU).
_base_ = './_classifier_shapes.py'
model = dict(backbone={{_base_.backbones_c5.hatnet}},
             head=dict(in_channels={{_base_.channels_c5.hatnet}}))
# HAT-Net takes half the recipe's peak learning rate (2e-3): at the shared rate its classifier
# reaches top-1 0.77-0.81 and a wider HAT-Net-q collapses to chance (loss ln 4, gradient norm
# -> 0.2); at half it reaches 0.84 (docs/quickstart_results.md, 'HAT-Net-q and PyramidTNT-q').
optim_wrapper = dict(optimizer=dict(lr=1e-3))
work_dir = './work_dirs/classifier_hatnet-q_20e_shapes'
