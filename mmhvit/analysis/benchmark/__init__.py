"""The sections of docs/benchmarks.md, one module per question (``tools/analysis_tools/
benchmark.py --sections ...`` writes the page): :mod:`.params` (params and FLOPs), :mod:`.speed`
(speed against the references, per-op profile), :mod:`.scaling` (cost against input size),
:mod:`.quickstart_speed` (quickstart s/iter),
:mod:`.plugins` (attention plugins in ResNet-50) and :mod:`.detection` (our backbones in
RetinaNet and Mask R-CNN against MMDet's Swin-T, PVTv2-b2 and ResNet-50). Each ``section_*``
function takes the tool's arguments and returns the section's Markdown lines; the measuring
primitives are in :mod:`mmhvit.utils.measure`."""
