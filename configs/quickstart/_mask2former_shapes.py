# Mask2Former (instance) on the shapes data, trained from scratch on the CPU: the recipe of every
# Mask2Former quickstart (12 epochs, AdamW lr 1e-3, batch 8). A config sets model.backbone and
# panoptic_head.in_channels from the tables of _shapes_base.py (all four strides).
# mmdet's model (mask2former_r50_8xb2-lsj-50e_coco.py) written out here: that config also carries
# its COCO data, which the shapes bases replace (MMEngine refuses a key from two bases).
# CPU-sized: 64 channels, 2 pixel-decoder and 3 transformer-decoder layers, 50 queries (at most 5
# objects an image) and 3136 sampled points per mask in place of 256, 6, 9, 100 and 12544; its
# losses, matching costs and masked attention as mmdet's.
_base_ = './_shapes_det.py'
width = 64
num_classes = 3
_ffn = dict(embed_dims=width, feedforward_channels=256, num_fcs=2, ffn_drop=0.,
            act_cfg=dict(type='ReLU', inplace=True))
_attn = dict(embed_dims=width, num_heads=8, dropout=0., batch_first=True)
model = dict(
    type='Mask2Former',
    data_preprocessor=dict(type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True, pad_size_divisor=32,
                           pad_mask=True, mask_pad_value=0, pad_seg=False),
    # mmdet's (ImageNet weights left out): every quickstart config replaces it
    backbone=dict(type='ResNet', depth=50, frozen_stages=-1,
                  norm_cfg=dict(type='BN', requires_grad=False), norm_eval=True),
    panoptic_head=dict(
        type='Mask2FormerHead', strides=[4, 8, 16, 32], feat_channels=width,
        out_channels=width, num_things_classes=num_classes, num_stuff_classes=0,
        num_queries=50, num_transformer_feat_level=3, enforce_decoder_input_project=False,
        pixel_decoder=dict(
            type='MSDeformAttnPixelDecoder', num_outs=3, norm_cfg=dict(type='GN', num_groups=16),
            act_cfg=dict(type='ReLU'),
            encoder=dict(num_layers=2, layer_cfg=dict(
                self_attn_cfg=dict(embed_dims=width, num_heads=8, num_levels=3, num_points=4,
                                   dropout=0., batch_first=True),
                ffn_cfg=_ffn)),
            positional_encoding=dict(num_feats=width // 2, normalize=True)),
        positional_encoding=dict(num_feats=width // 2, normalize=True),
        transformer_decoder=dict(
            return_intermediate=True, num_layers=3, init_cfg=None,
            layer_cfg=dict(self_attn_cfg=_attn, cross_attn_cfg=_attn, ffn_cfg=_ffn)),
        loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=2.,
                      reduction='mean', class_weight=[1.] * num_classes + [0.1]),
        loss_mask=dict(type='CrossEntropyLoss', use_sigmoid=True, reduction='mean',
                       loss_weight=5.),
        loss_dice=dict(type='DiceLoss', use_sigmoid=True, activate=True, reduction='mean',
                       naive_dice=True, eps=1., loss_weight=5.)),
    panoptic_fusion_head=dict(type='MaskFormerFusionHead', num_things_classes=num_classes,
                              num_stuff_classes=0, loss_panoptic=None, init_cfg=None),
    train_cfg=dict(
        num_points=3136, oversample_ratio=3., importance_sample_ratio=0.75,
        assigner=dict(type='HungarianAssigner', match_costs=[
            dict(type='ClassificationCost', weight=2.),
            dict(type='CrossEntropyLossCost', weight=5., use_sigmoid=True),
            dict(type='DiceCost', weight=5., pred_act=True, eps=1.)]),
        sampler=dict(type='MaskPseudoSampler')),
    test_cfg=dict(panoptic_on=False, semantic_on=False, instance_on=True, max_per_image=100,
                  iou_thr=0.8, filter_low_score=True),
    init_cfg=None)

_load_masks = dict(type='LoadAnnotations', with_bbox=True, with_mask=True)
train_pipeline = [
    dict(type='LoadImageFromFile'), _load_masks,
    dict(type='Resize', scale={{_base_.image_scale}}, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale={{_base_.image_scale}}, keep_ratio=True), _load_masks,
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(metric=['bbox', 'segm'])
test_evaluator = val_evaluator

# 12 epochs: a run takes about as long as a 16-epoch Mask R-CNN one on the 2-core machine
train_cfg = dict(max_epochs=12)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
