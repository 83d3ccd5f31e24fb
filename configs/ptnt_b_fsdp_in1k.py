# PyramidTNT-B (157 M) on ImageNet-1k, sharded (configs/_fsdp.py): ptnt_s_in1k.py's recipe with the
# base arch; drop path as PyramidTNT-S's. BatchNorm in the stem: on GPUs add SyncBN there.
# docs/distributed.md.
_base_ = ['./ptnt_s_in1k.py', './_fsdp.py']
model = dict(backbone=dict(arch='base'), head=dict(in_channels=1024))
strategy = dict(model_wrapper=dict(auto_wrap_policy=dict(family='PyramidTNT')))
