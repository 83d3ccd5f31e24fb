# Quickstart: UperNet with a quarter-width TransCNN, from scratch on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones.transcnn}},
             decode_head=dict(in_channels={{_base_.channels.transcnn}}))
work_dir = './work_dirs/upernet_transcnn-q_8e_shapes'
