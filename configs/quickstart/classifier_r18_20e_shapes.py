# Quickstart: ImageClassifier with the library's ResNet-18 (the baseline), from scratch on the
# bundled shapes data (CPU).
_base_ = './_classifier_shapes.py'
model = dict(backbone={{_base_.backbones_c5.r18}},
             head=dict(in_channels={{_base_.channels_c5.r18}}))
work_dir = './work_dirs/classifier_r18_20e_shapes'
