"""Checkpoint converters: pure functions from other layouts' state dicts to mmhvit's keys."""
from .ptnt import convert_ptnt_checkpoint, describe_ptnt_checkpoint, detect_ptnt_layout

__all__ = ['convert_ptnt_checkpoint', 'describe_ptnt_checkpoint', 'detect_ptnt_layout']
