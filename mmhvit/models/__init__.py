from .backbones import *  # noqa: F401,F403
from .plugins import *  # noqa: F401,F403
