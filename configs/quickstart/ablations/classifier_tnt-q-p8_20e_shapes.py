# Ablation (docs/quickstart_results.md, TNT): tnt-q with 8 x 8-pixel sentences of 2 x 2-pixel words
# (arch patch_size / word_size): 4x the sentences of the official 16 / 4 layout.
_base_ = '../classifier_tnt-q_20e_shapes.py'
model = dict(backbone=dict(arch=dict(patch_size=8, word_size=2)))
work_dir = './work_dirs/classifier_tnt-q-p8_20e_shapes'
