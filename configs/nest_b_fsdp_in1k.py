# NesT-B (68 M) on ImageNet-1k, sharded (configs/_fsdp.py): nest_t_in1k.py's recipe with the base
# arch (levels 128/256/512) and the official NesT-B drop path 0.5. docs/distributed.md.
_base_ = ['./nest_t_in1k.py', './_fsdp.py']
model = dict(backbone=dict(arch='base', drop_path_rate=0.5), head=dict(in_channels=512))
strategy = dict(model_wrapper=dict(auto_wrap_policy=dict(family='NesT')))
