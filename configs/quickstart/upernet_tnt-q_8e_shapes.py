# Quickstart: UperNet with a small TNT, from scratch on the bundled shapes data (CPU).
_base_ = './_upernet_shapes.py'
model = dict(backbone={{_base_.backbones.tnt}},
             decode_head=dict(in_channels={{_base_.channels.tnt}}))
work_dir = './work_dirs/upernet_tnt-q_8e_shapes'
