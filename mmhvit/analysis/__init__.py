"""Analysis helpers (interpretability) for the mmhvit backbones."""
