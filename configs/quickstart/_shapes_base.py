# What every quickstart config shares, whatever the task: the CPU-sized backbones (one of each of
# our families, plus ResNet-18 as the baseline), their output channels, and the schedule pieces
# (optimiser, warm-up + cosine, hooks, seed). The task bases (_retinanet_shapes.py,
# _mask-rcnn_shapes.py, _upernet_shapes.py, _classifier_shapes.py) add the library's model, data
# and runtime; a quickstart config only picks its backbone from the tables below.

# CPU-sized variants of similar cost at 256 x 256 (params / GFLOPs of the backbone alone:
# python tools/analysis_tools/get_flops.py). Trained from scratch, except UperNet's (below).
backbones = dict(
    # A quarter-width TransCNN-Tiny: the official stage layout, grids and pool ratios.
    transcnn=dict(
        _delete_=True, type='mmhvit.TransCNN',
        arch=dict(embed_dims=[32, 64, 128, 256], depths=[1, 1, 2, 1], num_heads=[1, 1, 2, 4],
                  mlp_ratio=[4, 4, 4, 4], grid_sizes=[8, 8, 8, 1], ds_ratios=[8, 4, 2, 1]),
        drop_path_rate=0.),
    # A half-width HAT-Net-Tiny (as the TransCNN above is of TransCNN-Tiny) with TransCNN-q's
    # depths: the official expansions, grids (8, 7, 7, 1), pool ratios and head width (= stage 1).
    hatnet=dict(
        _delete_=True, type='mmhvit.HATNet',
        arch=dict(embed_dims=[24, 48, 120, 192], depths=[1, 1, 2, 1], num_heads=[1, 2, 5, 8],
                  mlp_ratio=[8, 8, 4, 4], grid_sizes=[8, 7, 7, 1], ds_ratios=[8, 4, 2, 1]),
        drop_path_rate=0.),
    # NesT with blocks of 8 x 8 tokens (4 x 4 blocks at stride 4 on a 256 image) and the same
    # widths: levels 32/64/128, the stride-32 aggregation to 256 with one transformer layer.
    nest=dict(
        _delete_=True, type='mmhvit.NesT',
        arch=dict(embed_dims=[32, 64, 128, 256], depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8],
                  block_size=8),
        pretrain_img_size=256, drop_path_rate=0.),
    # TNT with 4 blocks of 128-wide sentences (8-wide words); one block per pyramid output. Its
    # words come from a convolutional stem (conv_stem): with the official per-patch 7x7 conv this
    # TNT trained from scratch stayed below ResNet-18 (Mask R-CNN segm mAP 0.452 against 0.804
    # with the stem; docs/quickstart_results.md, 'TNT: causes, measured').
    tnt=dict(
        _delete_=True, type='mmhvit.TNT',
        arch=dict(embed_dims=128, inner_dims=8, depths=[1, 1, 1, 1], num_heads=4,
                  inner_num_heads=2, conv_stem=True),
        pretrain_img_size=256, drop_path_rate=0.),
    # A quarter-width PyramidTNT-S (sentences 32-128 wide, heads of 32 channels) with its own
    # 2-8-4-2 blocks and key pooling; words half-width (4 channels, 4 per head: 2 would be
    # degenerate). Its pyramid upsamples every stage 2x to strides 4-32.
    ptnt=dict(
        _delete_=True, type='mmhvit.PyramidTNT',
        arch=dict(embed_dims=[32, 64, 128, 128], inner_dims=[4, 8, 16, 16], depths=[2, 8, 4, 2],
                  num_heads=[1, 2, 4, 4], inner_num_heads=[1, 2, 4, 4]),
        pretrain_img_size=256, drop_path_rate=0.),
    # The library's own ResNet-18 (type 'ResNet' resolves in the mmdet, mmseg and mmpretrain
    # scopes alike), from scratch, nothing frozen, BN in training mode as ours.
    r18=dict(
        _delete_=True, type='ResNet', depth=18, frozen_stages=-1, norm_eval=False,
        norm_cfg=dict(type='BN', requires_grad=True), init_cfg=None),
)
channels = dict(transcnn=[32, 64, 128, 256], hatnet=[24, 48, 120, 192], nest=[32, 64, 128, 256],
                tnt=[128, 128, 128, 128], ptnt=[32, 64, 128, 128], r18=[64, 128, 256, 512])
# Strides 8-32 only (RetinaNet's FPN): nothing is built or run for the stride-4 output.
backbones_c3_c5 = {name: dict(cfg, out_indices=(1, 2, 3)) for name, cfg in backbones.items()}
channels_c3_c5 = {name: c[1:] for name, c in channels.items()}
# The stride-16 map (UperNet's auxiliary head).
channels_c4 = {name: c[2] for name, c in channels.items()}
# The stride-32 map only (a classifier's global pooling).
backbones_c5 = {name: dict(cfg, out_indices=(3, )) for name, cfg in backbones.items()}
channels_c5 = {name: c[3] for name, c in channels.items()}
# Initialised from the classifier quickstart of the same backbone (TASK=cls; tools/quickstart.sh
# runs it first when its checkpoint is missing), as ADE20K recipes start from ImageNet weights.
classifier_checkpoints = dict(
    transcnn='work_dirs/classifier_transcnn-q_20e_shapes/weights.pth',
    hatnet='work_dirs/classifier_hatnet-q_20e_shapes/weights.pth',
    nest='work_dirs/classifier_nest-q_20e_shapes/weights.pth',
    tnt='work_dirs/classifier_tnt-q_20e_shapes/weights.pth',
    ptnt='work_dirs/classifier_ptnt-q_20e_shapes/weights.pth',
    r18='work_dirs/classifier_r18_20e_shapes/weights.pth')
backbones_from_classifier = {
    name: dict(cfg, init_cfg=dict(type='Pretrained', checkpoint=classifier_checkpoints[name],
                                  prefix='backbone.'))
    for name, cfg in backbones.items()}

# From-scratch AdamW, warm-up then cosine decay over whatever train_cfg.max_epochs the task sets
# (MMEngine ends a scheduler without `end` at the last epoch); the task sets lr.
quickstart_optim_wrapper = dict(
    _delete_=True, type='OptimWrapper', clip_grad=dict(max_norm=10.),
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.))
quickstart_param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', eta_min_ratio=0.05, by_epoch=True, begin=0,
         convert_to_iter_based=True)
]
# Logs every 10 iterations; a checkpoint every 50 iterations and at the end (only the last kept),
# so that a killed run loses at most 50 iterations: `tools/train.py CONFIG --resume` continues
# mid-epoch with the same batches and random draws (ResumableEpochBasedTrainLoop).
quickstart_hooks = dict(
    logger=dict(type='LoggerHook', interval=10, log_metric_by_epoch=True),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=50, max_keep_ckpts=1,
                    save_last=True))
quickstart_train_loop = 'ResumableEpochBasedTrainLoop'
quickstart_randomness = dict(seed=0)
