"""What the analysis tools under tools/analysis_tools/ compute, importable: GradCAT (NesT), gradient
norms per stage, training-log curves, the quickstart's targets and Swin's packaged models with our
backbones (swin_swap)."""
