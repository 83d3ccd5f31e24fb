from .backbones import *  # noqa: F401,F403
from .checkpoint import register_url_loaders
from .plugins import *  # noqa: F401,F403

# Every URL that MMEngine loads in this process (init_cfg, load_from, resume, inferencers) is
# downloaded into torch's hub cache and read weights-only, as our own loaders do.
register_url_loaders()
