# Mask R-CNN, HAT-Net-Small (25.7M), COCO 2017, 1x schedule, 8 GPUs x 2 images.
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
# The TransCNN recipe (HAT-Net's authors follow the same PVT recipes) with the HAT-Net backbone.
_base_ = ['./mask_rcnn_transcnn_b_coco.py', './_hatnet_s_coco_backbone.py']

checkpoint = {{_base_.hatnet_s_checkpoint}}  # replaces the TransCNN base's
model = dict(backbone={{_base_.hatnet_s_backbone}}, neck=dict(in_channels=[64, 128, 320, 512]))
