"""Synthetic traces with exactly known content (sigmatrace.trace.synth) and helpers to read
exports back."""
from __future__ import annotations

import collections
import json
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from sigmatrace.correlate.output import Output
from sigmatrace.trace.synth import SynthTrace

JITTER_NS = 30


def build_two_nodes(root, seed: int = 7, iters: int = 50, layout: str = "host", same_pid: bool = True):
    """Two nodes whose TSCs run at different rates (each off its nominal value), from different
    origins, with different monotonic origins; a verbs RC ping-pong, RDMA writes, and GPU
    writes/atomics both ways through devx QPs with doorbells and deferred WQE parsing (one batch
    lost).  The same pid on both nodes, as happens on clusters."""
    t = SynthTrace(seed)
    a = t.process("node-a", 4242, tsc_hz=2.4e9 * (1 + 40e-6), hz_estimate=2.4e9, tsc_at_t0=3 * 10**11,
                  mono_boot_ns=-5 * 10**11, calib_jitter_ns=JITTER_NS, env={"RANK": "0"})
    b = t.process("node-b", 4242 if same_pid else 5353, tsc_hz=3.1e9 * (1 - 25e-6), hz_estimate=3.1e9,
                  tsc_at_t0=9 * 10**12, mono_boot_ns=-7 * 10**12, calib_jitter_ns=JITTER_NS,
                  env={"RANK": "1", "CUDA_VISIBLE_DEVICES": "2,3"})
    qa, qb = t.rc_pair(a, b)
    t.pingpong(qa, qb, iters=iters, size=4096)
    a.calibrate(a.end_ns + 500)
    b.calibrate(b.end_ns + 700)
    t.rdma_writes(qa, 12, size=65536, signal_every=4)
    ga, gb = t.gpu_pair(a, b, gpu_a=0, gpu_b=1)
    t.gpu_ops(ga, 40, batch_doorbells=5, lose_batches=(2,))
    t.gpu_ops(gb, 9)
    dirs = t.write(root, layout=layout)
    t.qa, t.qb, t.ga, t.gb = qa, qb, ga, gb
    return t, dirs


@pytest.fixture
def two_nodes(tmp_path):
    return build_two_nodes(tmp_path / "run")


@dataclass
class ParsedTrace:
    """A Perfetto file read back with the generated protobuf classes."""

    packets: list
    names: dict = field(default_factory=dict)          # event name iid -> name
    arg_names: dict = field(default_factory=dict)
    strings: dict = field(default_factory=dict)
    tracks: dict = field(default_factory=dict)         # uuid -> TrackDescriptor
    events: list = field(default_factory=list)         # (packet, TrackEvent)

    def name(self, te) -> str:
        return self.names.get(te.name_iid, te.name) if te.name_iid else te.name

    def args(self, te) -> dict:
        out = {}
        for a in te.debug_annotations:
            key = self.arg_names.get(a.name_iid, a.name) if a.name_iid else a.name
            if a.HasField("string_value_iid"):
                out[key] = self.strings[a.string_value_iid]
            elif a.HasField("uint_value"):
                out[key] = a.uint_value
            elif a.HasField("int_value"):
                out[key] = a.int_value
            elif a.HasField("string_value"):
                out[key] = a.string_value
            elif a.HasField("bool_value"):
                out[key] = a.bool_value
        return out

    def track_name(self, uuid: int) -> str:
        td = self.tracks[uuid]
        if td.HasField("thread"):
            return td.thread.thread_name
        if td.HasField("process"):
            return td.process.process_name
        return td.name

    def process_of(self, uuid: int) -> str:
        """The process name a track belongs to."""
        td = self.tracks[uuid]
        while True:
            if td.HasField("process"):
                return td.process.process_name
            if td.HasField("thread"):
                for t in self.tracks.values():
                    if t.HasField("process") and t.process.pid == td.thread.pid:
                        return t.process.process_name
            td = self.tracks[td.parent_uuid]

    def count(self, **where) -> collections.Counter:
        c = collections.Counter()
        for pkt, te in self.events:
            c[self.name(te)] += 1
        return c

    def flows(self) -> tuple[set, set]:
        out, end = set(), set()
        for _, te in self.events:
            out.update(te.flow_ids)
            end.update(te.terminating_flow_ids)
        return out, end


def parse_perfetto(path) -> ParsedTrace:
    t = pb.Trace()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    pt = ParsedTrace(list(t.packet))
    for p in pt.packets:
        if p.HasField("interned_data"):
            d = p.interned_data
            pt.names.update({e.iid: e.name for e in d.event_names})
            pt.arg_names.update({e.iid: e.name for e in d.debug_annotation_names})
            pt.strings.update({e.iid: e.str.decode() for e in d.debug_annotation_string_values})
        if p.HasField("track_descriptor"):
            pt.tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("track_event"):
            pt.events.append((p, p.track_event))
    return pt


def run_gda_example(d, args: list[str]) -> dict:
    """The GDA example (CPU threads standing in for the GPU, on the CUDA driver test double and the
    emulated NIC) run with ARGS under `sigmatrace spawn` into folder D, its own check passed, and
    exported to Perfetto and Parquet: {"dir": D, "summary": its --json summary, "pt": the Perfetto
    file parsed}.  Skips when the example or the driver test double is not built."""
    try:
        from sigmatrace import gda
        env = gda.environment("cpu")
        binary = gda.binary("cpu")
    except Exception as e:            # the example or the driver test double is not built
        pytest.skip(f"GDA example not available: {e}")
    argv = [str(binary), *args, "--json", str(d / "summary.json"), "--quiet"]
    p = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "spawn", "--quiet", "--out", str(d / "trace"),
                        "--", *argv], env=env, capture_output=True, text=True, timeout=240, start_new_session=True)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads((d / "summary.json").read_text())
    assert summary["verify"]["ok"]
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "export", str(d / "trace"), "--perfetto",
                        str(d / "g.pftrace"), "--parquet", str(d / "t"), "-q"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return {"dir": d, "summary": summary, "pt": parse_perfetto(d / "g.pftrace")}


class Collect(Output):
    """An output that keeps every batch it is given (for tests of the correlation itself)."""

    name = "collect"
    needs_flows = True

    def __init__(self):
        self.parts = {"calls": [], "host": [], "wqes": [], "doorbells": []}

    def add(self, part):
        self.parts[part.kind].append(part.batch)

    def get(self, kind):
        from sigmatrace.correlate.events import Batch
        parts = self.parts[kind]
        return Batch.concat(parts) if parts else None


def collect(dirs, chunk_records=1 << 17):
    from sigmatrace.correlate.model import RunModel
    from sigmatrace.correlate.output import write
    c = RunModel.load(dirs, chunk_records=chunk_records)
    s = Collect()
    res = write(c, [s])
    return c, s, res
