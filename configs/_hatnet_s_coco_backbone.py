# The HAT-Net-Small backbone of the COCO configs (RetinaNet, Mask R-CNN), which take the TransCNN
# recipes and replace the backbone with this one.
hatnet_s_checkpoint = 'https://github.com/yun-liu/HAT-Net/releases/download/v2.0/HAT-Net_Small.pth'
hatnet_s_backbone = dict(
    type='mmhvit.HATNet',
    arch='small',
    norm_eval=False,  # GroupNorm(1): no batch statistics to keep
    init_cfg=dict(type='Pretrained', checkpoint=hatnet_s_checkpoint))  # converted on load
