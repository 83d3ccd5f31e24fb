# Mask R-CNN, ResNet-50 with H-MHSA plugins, COCO 2017, 1x schedule, 8 GPUs x 2 images.
# Data: data/coco/{train2017,val2017,annotations/instances_{train,val}2017.json}
# MMDet's own Mask R-CNN R-50 recipe (torchvision's ImageNet ResNet-50, SGD) plus one residual
# H-MHSA block after conv3 of every bottleneck of stages 2-4, as MMDet's GCNet plugin configs add
# theirs; the blocks start as the identity, so training starts from the pretrained ResNet.
_base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', './_hmhsa_plugins.py']
custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)

model = dict(backbone=dict(plugins={{_base_.hmhsa_plugins}}))
