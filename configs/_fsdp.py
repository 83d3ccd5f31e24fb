# Sharded data parallel (MMEngine's FlexibleRunner with its FSDPStrategy, torch FSDP): inherit it
# after an ImageNet config and set the family of the wrap policy (configs/*_fsdp_in1k.py do).
# tools/train.py picks FlexibleRunner for a config with a `strategy`; launch it as any other run
# (tools/dist_train.sh, tools/slurm_train.sh). On a CPU-only machine the ranks shard over gloo.
strategy = dict(
    type='FSDPStrategy',
    model_wrapper=dict(
        # One FSDP unit per backbone block (mmhvit/engine/fsdp.py); the rest is the root unit.
        auto_wrap_policy=dict(type='hvit_block_wrap_policy', family=None),
        use_orig_params=True),  # parameter names (and so paramwise_cfg) as without FSDP
    # Checkpoints gathered on rank 0 into one ordinary file: it loads into a plain Runner,
    # tools/test.py or init_cfg=dict(type='Pretrained'), and plain checkpoints load under FSDP.
    state_dict_cfg='full')
# FSDP's gradients are sharded: OptimWrapper's clip_grad would clip each rank by its own shard's
# norm, so tools/train.py refuses clip_grad by norm with FSDPStrategy (none of the ImageNet
# recipes clips).
