# The H-MHSA plugins of the ResNet-50 configs: one residual H-MHSA block after conv3 of every
# bottleneck of stages 2-4 (where MMDet's GCNet / NonLocal configs put theirs).
hmhsa_plugins = [
    dict(cfg=dict(type='mmhvit.HMHSAPlugin', grid_size=8, ds_ratio=4),
         stages=(False, True, True, True), position='after_conv3')
]
