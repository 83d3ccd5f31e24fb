# One line per backbone family; importing a module registers its class.
from .hatnet import HATNet  # noqa: F401
from .nest import NesT  # noqa: F401
from .pyramid_tnt import PyramidTNT  # noqa: F401
from .tnt import TNT  # noqa: F401
from .transcnn import TransCNN  # noqa: F401
