# TransCNN-L (80 M) on ImageNet-1k, sharded (configs/_fsdp.py): transcnn_b_in1k.py's recipe with
# the large arch; drop path as TransCNN-B's. BatchNorm in the blocks: on GPUs add
# model.backbone.norm_cfg=dict(type='SyncBN') (per-rank statistics otherwise). docs/distributed.md.
_base_ = ['./transcnn_b_in1k.py', './_fsdp.py']
model = dict(backbone=dict(arch='large'), head=dict(in_channels=768))
strategy = dict(model_wrapper=dict(auto_wrap_policy=dict(family='TransCNN')))
