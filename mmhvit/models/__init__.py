from .backbones import *  # noqa: F401,F403
