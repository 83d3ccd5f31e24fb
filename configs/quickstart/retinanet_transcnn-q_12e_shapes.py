# Quickstart: RetinaNet with a small TransCNN, trained from scratch on the bundled shapes data on CPU.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    './_shapes_cpu.py',
]
model = dict(
    data_preprocessor=dict(pad_size_divisor=32),
    backbone=dict(_delete_=True, type='mmhvit.TransCNN', arch={{_base_.transcnn_q}},
                  out_indices=(1, 2, 3), drop_path_rate=0.),
    neck=dict(in_channels=[64, 128, 256], out_channels=64, start_level=0, num_outs=5),
    bbox_head=dict(num_classes=3, in_channels=64, feat_channels=64, stacked_convs=2))

train_cfg = dict(max_epochs=12, val_interval=12)
work_dir = './work_dirs/retinanet_transcnn-q_12e_shapes'
