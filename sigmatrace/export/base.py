"""The small interface every output format implements (see sigmatrace.correlate.pipeline)."""
from ..correlate.pipeline import ExportResult, Sink, run

__all__ = ["ExportResult", "Sink", "run"]
