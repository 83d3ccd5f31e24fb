# The TNT-S backbone of the Swin-recipe configs (Cascade Mask R-CNN, DINO, Mask2Former), which add
# it to their recipes.
tnt_s_checkpoint = ('https://github.com/huawei-noah/Efficient-AI-Backbones/releases/download/tnt/'
                    'tnt_s_81.5.pth.tar')
tnt_s_backbone = dict(
    _delete_=True,  # replaces the base recipe's ResNet
    type='mmhvit.TNT',
    arch='small',
    init_cfg=dict(type='Pretrained', checkpoint=tnt_s_checkpoint))
tnt_s_channels = [384, 384, 384, 384]  # strides 4-32
# What Swin's recipes exempt from weight decay ('norm', 'absolute_pos_embed',
# 'relative_position_bias_table'), in TNT's names: its norms (the stride-4 map's LayerNorm2d is
# out_proj.1), the sentence and word position embeddings and the class token. Each key is longer
# than 'backbone', so that it wins over Mask2Former's 'backbone' key (MMEngine takes the longest
# key that matches).
tnt_s_no_decay = ['pos_embed', 'cls_token', 'patch_embed.norm', 'inner.norm', 'outer.norm',
                  'word_proj.norm', '.out_norm', 'stages.3.norm', 'out_proj.1.']
