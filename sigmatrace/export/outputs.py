"""The output formats of `sigmatrace export`: one entry each, one module each.

An entry gives the command-line option that asks for the format and where its Output class is;
the command builds its options from this list, and the module is imported only when its format
is asked for (pyarrow and the Perfetto protos are slow to load).  A new format is its module
(an Output: begin / add / finish / describe, see sigmatrace.correlate.output) and one entry here.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:                      # the registry itself stays light: the CLI reads it at start
    from ..correlate.output import Output


@dataclass(frozen=True)
class OutputFormat:
    name: str               # also the keyword of its option in the export command
    flags: tuple[str, ...]  # command-line option(s)
    metavar: str
    help: str
    target: str             # "package.module:Class"

    def make(self, path: str | os.PathLike) -> Output:
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)(path)


FORMATS = (
    OutputFormat("perfetto", ("--perfetto", "-p"), "OUT.pftrace", "Write a Perfetto protobuf trace.",
                 "sigmatrace.export.perfetto:PerfettoOutput"),
    OutputFormat("parquet", ("--parquet",), "DIR",
                 "Write Parquet tables (ops, doorbells: partitioned by node and rank; calls, qps, mrs, processes, "
                 "problems).",
                 "sigmatrace.export.parquet:ParquetOutput"),
    OutputFormat("json", ("--json",), "OUT.json", "Write aggregate JSON (per-QP and per-GPU volume, matrices).",
                 "sigmatrace.export.json:JsonOutput"),
)
BY_NAME = {f.name: f for f in FORMATS}
DEFAULT = "perfetto"          # written to TRACE.pftrace when no format is asked for
DEFAULT_SUFFIX = ".pftrace"
