"""The plugin's model registry.

``MODELS`` is a child of MMEngine's root registry with scope ``mmhvit``, so that
``dict(type='mmhvit.TransCNN')`` builds from any OpenMMLab scope (mmdet, mmseg, mmpretrain):
the scoped name makes MMEngine import ``mmhvit.registry`` and then ``mmhvit.models``.
"""
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry

MODELS = Registry('model', parent=MMENGINE_MODELS, scope='mmhvit', locations=['mmhvit.models'])


def register_backbone(*, plain_name: bool):
    """Register a backbone under ``mmhvit.<Name>``; ``plain_name`` also makes ``<Name>`` resolve.

    A plain ``type='Name'`` is looked up in the current scope's registry and then its parents, never
    its siblings, so a plain name has to live in MMEngine's root registry to be found from the
    mmdet, mmseg and mmpretrain scopes. Only names that no OpenMMLab library owns get a plain name.
    """

    def _register(cls):
        MODELS.register_module(module=cls)
        if plain_name:
            MMENGINE_MODELS.register_module(module=cls)
        return cls

    return _register
