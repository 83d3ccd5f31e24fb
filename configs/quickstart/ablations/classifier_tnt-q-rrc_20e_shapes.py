# Ablation (docs/quickstart_results.md, issue 23): the TNT-q classifier quickstart with random
# resized crops (half to all of the crop's area, ImageNet's aspect range) in place of the fixed
# resize: does augmentation, which every ViT recipe relies on, make it generalise?
_base_ = '../classifier_tnt-q_20e_shapes.py'
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale={{_base_.image_scale}}, crop_ratio_range=(0.5, 1.0)),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs')
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
work_dir = './work_dirs/classifier_tnt-q-rrc_20e_shapes'
