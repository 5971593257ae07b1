"""Capture: starting or reaching the traced processes, loading the agent, and the trace
directory's metadata.  `Controller` is the entry point (spawn / attach)."""
from .config import CaptureOptions, Mode
from .controller import Controller, CaptureResult

__all__ = ["CaptureOptions", "Mode", "Controller", "CaptureResult"]
