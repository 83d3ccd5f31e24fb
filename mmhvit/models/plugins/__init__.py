from .hmhsa_plugin import HMHSAPlugin

__all__ = ['HMHSAPlugin']
