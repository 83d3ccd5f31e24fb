# Quickstart: UperNet with the library's ResNet-18 (the baseline), from scratch on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones.r18}},
             decode_head=dict(in_channels={{_base_.channels.r18}}))
work_dir = './work_dirs/upernet_r18_8e_shapes'
