"""Run a config (and its checkpoint) on one image: detection, segmentation or classification.

    python demo/image_demo.py IMAGE CONFIG [CHECKPOINT] --out-file out.png [--device cpu]

The config picks the inferencer (MMDet's DetInferencer, MMSeg's MMSegInferencer or MMPretrain's
ImageClassificationInferencer, by its ``default_scope`` or model type). CONFIG is a path or the
name of a config the package ships (``mmhvit list``). The drawing goes to ``--out-file``; the
result is printed. The same as ``mmhvit demo`` of an installed wheel.
"""
import sys

from mmhvit.cli import main

if __name__ == '__main__':
    main(['demo', *sys.argv[1:]])
