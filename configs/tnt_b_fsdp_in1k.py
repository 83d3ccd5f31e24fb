# TNT-B (65 M) on ImageNet-1k, sharded (configs/_fsdp.py): tnt_s_in1k.py's recipe with the base
# arch (640-wide sentences); drop path as TNT-S's. docs/distributed.md.
_base_ = ['./tnt_s_in1k.py', './_fsdp.py']
model = dict(backbone=dict(arch='base'), head=dict(in_channels=640))
strategy = dict(model_wrapper=dict(auto_wrap_policy=dict(family='TNT')))
