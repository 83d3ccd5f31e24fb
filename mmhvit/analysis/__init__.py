"""What the analysis tools under tools/analysis_tools/ compute, importable: GradCAT (NesT), gradient
norms per stage, training-log curves and the quickstart's targets."""
