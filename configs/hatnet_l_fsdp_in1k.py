# HAT-Net-L (63 M) on ImageNet-1k, sharded (configs/_fsdp.py): hatnet_s_in1k.py's recipe with the
# large arch; drop path as HAT-Net-S's. docs/distributed.md.
_base_ = ['./hatnet_s_in1k.py', './_fsdp.py']
model = dict(backbone=dict(arch='large'), head=dict(in_channels=640))
strategy = dict(model_wrapper=dict(auto_wrap_policy=dict(family='HATNet')))
