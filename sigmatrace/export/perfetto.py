"""Perfetto protobuf trace (.pftrace): open it at https://ui.perfetto.dev or with trace_processor.

Layout of the timeline:
  process "host:pid exe"                 one per traced process (pids that collide across nodes
    thread tracks                        are renumbered; the name keeps the real one)
      ucp_* / uct_ep_* / fi_*            calls of the layers above verbs: slices from CALL to
                                         CALL_END, nested (a UCP call holds its UCT call)
      ibv_post_send / ibv_post_recv / ibv_post_srq_recv / ibv_poll_cq
                                         host calls, zero-length slices at their entry time,
                                         the record's fields as arguments (inside the call
                                         that made them)
    GPU n                                a group per GPU, holding the tracks of its QPs
      QP 0x.. RC -> host:pid qp 0x..     doorbells (with their WQEs' opcode, bytes, remote
                                         address) and WQEs (at their doorbell's time)
      doorbells/s, bytes/s               counter tracks
    CXI CQ n                             libcxi commands
    posted bytes/s                       counter track of host-posted volume
Flows connect each receive-consuming send to the peer's receive completion and each signaled
work request to its completion, across processes and trace directories, and each UCT call to
the CPU-posted WQEs it wrote.  Timestamps are
CLOCK_REALTIME ns, the common base of all nodes.

Hot packets (every record) are encoded column-wise by protoenc; descriptors, cold-path events
and notes go through the generated protobuf classes.  One sequence (id 1) carries the hot
packets with interned names; another (id 2) carries the rest with plain strings.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ..correlate import ops as O
from ..correlate.calls import MAX_WQES_PER_CALL, function_pairs
from ..correlate.events import Batch
from ..correlate.matrix import physical_gpu
from ..correlate.model import RunModel
from ..correlate.output import Output
from ..correlate.traceset import Proc
from ..decode import names as N
from ..trace import format as fmt
from ..trace import layers as ly
from ..trace.reader import Problem
from . import protoenc as pe
from .outfile import open_output

RT = fmt.RecType
HOT_SEQ, COLD_SEQ = 1, 2
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
SEQ_CLEARED, SEQ_NEEDS = 1, 2

# interned event names
EV_POST_SEND, EV_POST_RECV, EV_POST_SRQ_RECV, EV_POLL_CQ, EV_DOORBELL, EV_WQE_LOSS = 1, 2, 3, 4, 5, 6
EV_NAMES = {EV_POST_SEND: "ibv_post_send", EV_POST_RECV: "ibv_post_recv", EV_POST_SRQ_RECV: "ibv_post_srq_recv",
            EV_POLL_CQ: "ibv_poll_cq", EV_DOORBELL: "doorbell", EV_WQE_LOSS: "wqe_loss"}
EV_MLX5_BASE, EV_CXI_BASE, EV_CALL_BASE = 64, 64 + 256, 64 + 512
LINK_FLOW = np.uint64(1 << 63)    # flow ids of call -> WQE links (the others stay below 2^63)

# interned debug-annotation names
ARG_NAMES = ["qpn", "op", "wrs", "bytes", "remote_addr", "rkey", "wr_id", "flags", "peer", "sge", "imm",
             "remote_qpn", "compare_add", "swap", "addr", "lkey", "srq", "opcode", "status", "src_qp",
             "pi", "bbs", "wqes", "lost_bbs", "repeater", "raw", "wqe_index", "ds", "opmod", "segments",
             "local_addr", "parse_delay_ns", "first_index", "cq", "cmd_type", "dst_nid", "dst_ep",
             "remote_offset", "write_pointer", "site", "doorbell_pi", "inline", "call_id", "endpoint", "ret",
             "wqe_range", "dest", "tries", "operand_bytes", "swap_mask", "compare_mask", "field_boundary"]
ARG = {name: i + 1 for i, name in enumerate(ARG_NAMES)}

# interned string values: one block of 256 per code table, then endpoint labels
STR_TABLES = [N.IBV_WR, N.IBV_WC_OPCODE, N.IBV_WC_STATUS, N.MLX5_OPCODE, N.CXI_CMD_TYPE]
S_WR, S_WC, S_STATUS, S_MLX5, S_CXI_TYPE = (1 + 256 * i for i in range(len(STR_TABLES)))
S_PEER = 1 + 256 * len(STR_TABLES)

# kinds of tracks; a track's uuid is a small number handed out in order (small varints)
K_PROC, K_THREAD, K_QP, K_GPU, K_COUNTER, K_CXI, K_NOTES = 1, 2, 3, 4, 5, 6, 7
M_DOORBELLS, M_BYTES = 1, 2

_MLX5_ATOMIC = O.table(0x11, 0x12, 0x14, 0x15)     # ATOMIC_CS, ATOMIC_FA and their masked forms
_MLX5_IMM = O.table(0x09, 0x0B)                    # RDMA_WRITE_IMM, SEND_IMM
_WR_ATOMIC = O.table(5, 6)                         # IBV_WR_ATOMIC_CMP_AND_SWP, _FETCH_AND_ADD
_WR_IMM = O.table(1, 3)                            # IBV_WR_RDMA_WRITE_WITH_IMM, SEND_WITH_IMM
_POSTED = O.table(RT.POST_SEND, RT.SEND_WR)


class PerfettoOutput(Output):
    name = "perfetto"
    needs_flows = True

    def __init__(self, path: str | os.PathLike, counter_bins: int = 20000):
        self.path = Path(path)
        self.counter_bins = counter_bins
        self.events = 0
        self.flows = 0

    # ---- set-up ------------------------------------------------------------------------------

    def begin(self, model: RunModel) -> None:
        self.model = model
        self.topo = model.topology
        self.f = open_output(self.path, "wb", buffering=1 << 22)
        self.described: set[int] = set()
        self.uuids: dict[tuple[int, int, int], int] = {}
        self.ids = DisplayIds(model.procs)
        lo, hi = model.traces.span_ns()
        lo = max(lo, 0)    # a damaged record (skipped, reported) may have wrapped the raw scan's span
        self.t0, self.t1 = lo, max(hi, lo + 1)
        self.bin_ns = max(1000, -(-(self.t1 - self.t0) // self.counter_bins))
        self.nbins = (self.t1 - self.t0) // self.bin_ns + 1
        self.counters: dict[tuple[int, int, int], np.ndarray] = {}
        self.call_names = {pair: EV_CALL_BASE + i for i, pair in enumerate(function_pairs(model.calls.values()))}
        self.call_rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}    # proc -> (sorted call ids, rows)
        self.link_state: dict = {}
        snap = pb.TracePacket()
        snap.timestamp = self.t0
        snap.trusted_packet_sequence_id = COLD_SEQ
        snap.clock_snapshot.primary_trace_clock = pb.BUILTIN_CLOCK_REALTIME
        for cid in (pb.BUILTIN_CLOCK_REALTIME, pb.BUILTIN_CLOCK_BOOTTIME):
            clk = snap.clock_snapshot.clocks.add()
            clk.clock_id, clk.timestamp = cid, self.t0
        self._pb(snap)
        self._pb(self._interned())
        for p in model.procs:
            self._describe_process(p)

    def _interned(self) -> pb.TracePacket:
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = HOT_SEQ
        pkt.sequence_flags = SEQ_CLEARED
        pkt.first_packet_on_sequence = True
        d = pkt.interned_data
        for iid, name in EV_NAMES.items():
            d.event_names.add(iid=iid, name=name)
        for code in range(256):
            d.event_names.add(iid=EV_MLX5_BASE + code, name=N.name(N.MLX5_OPCODE, code))
            d.event_names.add(iid=EV_CXI_BASE + code, name="cxi " + N.name(N.CXI_DMA_OPCODE, code))
        for pair, iid in self.call_names.items():
            d.event_names.add(iid=iid, name=ly.function_name(*pair))
        for name, iid in ARG.items():
            d.debug_annotation_names.add(iid=iid, name=name)
        for t, table in enumerate(STR_TABLES):
            for code in range(256):
                d.debug_annotation_string_values.add(iid=1 + 256 * t + code, str=N.name(table, code).encode())
        for i, q in enumerate(self.topo.qps):
            d.debug_annotation_string_values.add(iid=S_PEER + i, str=self._ep_label(i).encode())
        return pkt

    def uuid(self, kind: int, proc: int = 0, obj: int = 0) -> int:
        k = (kind, proc, obj)
        u = self.uuids.get(k)
        if u is None:
            u = self.uuids[k] = len(self.uuids) + 1
        return u

    def _tracks(self, describe, p: Proc, objs: np.ndarray) -> np.ndarray:
        """The track uuid of each row, describing tracks met for the first time."""
        u, inv = O.unique_inverse(objs)
        ids = np.array([describe(p, int(o)) for o in u.tolist()], np.uint64)
        return ids[inv]

    def _ep_label(self, ep: int) -> str:
        q = self.topo.qps[ep]
        return f"{self.model.procs[q.proc].label} qp 0x{q.qpn:x}"

    def _pb(self, pkt: pb.TracePacket) -> None:
        t = pb.Trace()
        t.packet.append(pkt)
        self.f.write(t.SerializeToString())

    def _descriptor(self, td: pb.TrackDescriptor) -> None:
        if td.uuid in self.described:
            return
        self.described.add(td.uuid)
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = COLD_SEQ
        pkt.track_descriptor.CopyFrom(td)
        self._pb(pkt)

    def _describe_process(self, p: Proc) -> None:
        td = pb.TrackDescriptor(uuid=self.uuid(K_PROC, p.index))
        td.process.pid = self.ids.pids[p.index]
        exe = os.path.basename(str(p.pt.meta.get("exe") or (p.argv[0] if p.argv else "")))
        rank = f" rank {p.rank}" if p.rank is not None else ""
        td.process.process_name = f"{p.label}{rank} {exe}".strip()
        td.process.cmdline.extend(p.argv)
        self._descriptor(td)
        # threads with records get their tracks now (in tid order); others when an event names them
        # (a stream of CALIB records only, such as the runtime's flusher, gets none)
        busy = {s.tid for s in p.streams if int(s.type_counts.sum() - s.type_counts[RT.CALIB])}
        for tid, name in sorted(p.thread_names().items()):
            if tid in busy:
                self._describe_thread(p, tid, name)

    def _describe_thread(self, p: Proc, tid: int, name: str | None = None) -> int:
        u = self.uuid(K_THREAD, p.index, tid)
        if u not in self.described:
            td = pb.TrackDescriptor(uuid=u)
            td.thread.pid = self.ids.pids[p.index]
            td.thread.tid = self.ids.tid(p.index, tid)
            td.thread.thread_name = name or p.thread_names().get(tid, f"thread {tid}")
            self._descriptor(td)
        return u

    def _describe_gpu(self, p: Proc, gpu: int) -> int:
        u = self.uuid(K_GPU, p.index, gpu + 1)
        if u not in self.described:
            td = pb.TrackDescriptor(uuid=u, parent_uuid=self.uuid(K_PROC, p.index))
            td.name = f"GPU {physical_gpu(p.pt.meta.get('env') or {}, gpu)}" if gpu >= 0 else "doorbell values seen"
            self._descriptor(td)
        return u

    def _describe_qp(self, p: Proc, qpn: int) -> int:
        u = self.uuid(K_QP, p.index, qpn)
        if u in self.described:
            return u
        ep = self.topo.index_of(p.index, qpn)
        q = self.topo.qps[ep] if ep >= 0 else None
        parent = self._describe_gpu(p, q.gpu) if q is not None and q.gpu >= 0 else self.uuid(K_PROC, p.index)
        td = pb.TrackDescriptor(uuid=u, parent_uuid=parent)
        name = f"QP 0x{qpn:x}"
        if q is not None:
            name += f" {q.type}"
            if q.peer >= 0:
                name += f" -> {self._ep_label(q.peer)}"
        td.name = name
        self._descriptor(td)
        return u

    def _describe_cxi(self, p: Proc, cq: int) -> int:
        u = self.uuid(K_CXI, p.index, cq)
        if u not in self.described:
            td = pb.TrackDescriptor(uuid=u, parent_uuid=self.uuid(K_PROC, p.index), name=f"CXI CQ {cq}")
            self._descriptor(td)
        return u

    # ---- hot events --------------------------------------------------------------------------

    def calls(self, p: Proc, b: Batch) -> None:
        """Calls as slices on their thread's track (CALL to CALL_END; one without its end is an
        instant); a UCT call's slice starts one flow per WQE index of its range, ended by the
        WQEs it wrote (`wqes`)."""
        order = np.argsort(b["id"], kind="stable")
        self.call_rows[p.index] = (b["id"][order], order.astype(np.int64))
        track = self._tracks(self._describe_thread, p, b["tid"])
        name = np.array([self.call_names[(la, fn)] for la, fn in zip(b["layer"].tolist(), b["op"].tolist())], np.int64)
        closed = b["closed"]
        ranged = b["pi0"] >= 0
        args = [("call_id", b["id"]), ("endpoint", b["ep"], b["ep"] != 0), ("qpn", b["qpn"], b["qpn"] != 0),
                ("bytes", b["len"]), ("remote_addr", b["addr"], b["addr"] != 0), ("rkey", b["key"], b["key"] != 0),
                ("wqe_range", (b["pi0"].astype(np.int64) << 16) | np.maximum(b["pi1"], 0), ranged)]
        width = np.where(ranged & closed, (b["pi1"].astype(np.int64) - b["pi0"]) & 0xFFFF, 0)
        width = np.where(width <= MAX_WQES_PER_CALL, width, 0)
        rows = np.arange(b.n, dtype=np.uint64)
        links = [self._link(p.index, rows, np.full(b.n, k, np.uint64)) * (width > k)
                 for k in range(int(width.max()) if b.n else 0)]
        out = []
        depth = b["depth"].astype(np.int64)
        # begins outermost first, ends innermost first: slices that share a timestamp still nest
        m = np.flatnonzero(closed)
        m = m[np.lexsort((depth[m], b["ns"][m]))]
        if len(m):
            sub = [(a[0], a[1][m]) + ((a[2][m],) if len(a) > 2 else ()) for a in args]
            out.append(self._encode(b["ns"][m], track[m], name[m], sub, [fl[m] for fl in links], None, SLICE_BEGIN,
                                    count_flows=False))
            m = m[np.lexsort((-depth[m], b["end_ns"][m]))]
            end = [("ret", b["ret"][m].astype(np.int64), None, "i"),
                   ("dest", b["dest"][m], b["dest"][m] != 0),
                   ("tries", b["tries"][m].astype(np.int64), b["tries"][m] != 0, "i")]
            out.append(self._encode(b["end_ns"][m], track[m], name[m], end, [], None, SLICE_END))
        m = np.flatnonzero(~closed)
        if len(m):
            sub = [(a[0], a[1][m]) + ((a[2][m],) if len(a) > 2 else ()) for a in args]
            out.append(self._encode(b["ns"][m], track[m], name[m], sub, [], None))
        self.f.write(b"".join(out))

    def _link(self, proc: int, row, k) -> np.ndarray:
        """The flow id of the k-th WQE of a process's call (by its row in the call batch)."""
        return LINK_FLOW | (np.uint64(proc & 0x7FFF) << np.uint64(48)) | \
            ((np.asarray(row, np.uint64) & np.uint64((1 << 36) - 1)) << np.uint64(12)) | np.asarray(k, np.uint64)

    def _wqe_links(self, p: Proc, s: Batch) -> np.ndarray | None:
        """Terminating flow ids of WQEs a call wrote (0: none), the k-th of each call the k-th."""
        rows = self.call_rows.get(p.index)
        if rows is None or not s.has("call"):
            return None
        call = s["call"].astype(np.int64)
        m = np.flatnonzero(call != 0)
        out = np.zeros(s.n, np.uint64)
        if not len(m):
            return out
        ids, order = rows
        i = np.clip(np.searchsorted(ids, call[m]), 0, len(ids) - 1)
        ok = ids[i] == call[m]
        m, row = m[ok], order[i[ok]]
        k = O.ordinals(row, self.link_state)
        keep = k < MAX_WQES_PER_CALL
        out[m[keep]] = self._link(p.index, row[keep], k[keep])
        self.flows += int(keep.sum())
        return out

    def host(self, p: Proc, b: Batch) -> None:
        t = b["type"]
        track = self._tracks(self._describe_thread, p, b["tid"])
        parts = []
        for rt, fn in ((RT.POST_SEND, self._post_send), (RT.SEND_WR, self._send_wr), (RT.RECV_WR, self._recv),
                       (RT.POST_SRQ_RECV, self._recv), (RT.COMPLETION, self._completion), (RT.CXI_CMD, self._cxi)):
            m = np.flatnonzero(t == rt)
            if len(m):
                sub = b.take(m)
                parts.append(fn(p, sub, track[m], rt))
        self._count(p, b, "host")
        self.f.write(b"".join(parts))

    def wqes(self, p: Proc, b: Batch) -> None:
        track = self._tracks(self._describe_qp, p, b["qpn"])
        ts = np.where(b["db_ns"] >= 0, b["db_ns"], b["ns"])
        wqe = b["type"] == RT.WQE
        out = []
        m = np.flatnonzero(wqe)
        if len(m):
            s = b.take(m)
            atomic = _MLX5_ATOMIC[s["op"]]
            has_db = s["db_ns"] >= 0
            args = [
                ("wqe_index", s["aux32"]), ("ds", s["aux"]), ("bytes", s["len"]), ("remote_addr", s["addr"]),
                ("rkey", s["key"]), ("flags", s["flags"]),
                ("imm", s["extra"] & np.uint64(0xFFFFFFFF), _MLX5_IMM[s["op"]]),
                ("opmod", s["extra"] >> np.uint64(32), (s["extra"] >> np.uint64(32)) != 0),
                ("segments", s["nseg"], s["nseg"] > 0), ("local_addr", s["seg_addr"], s["nseg"] > 0),
                ("lkey", s["seg_key"], s["nseg"] > 0),
                ("compare_add", s["cmp"], atomic), ("swap", s["swp"], atomic),
                ("operand_bytes", s["amo_size"], atomic & (s["amo_size"] > 0)),
                ("swap_mask", s["swp_mask"], s["op"] == 0x14), ("compare_mask", s["cmp_mask"], s["op"] == 0x14),
                ("field_boundary", s["swp_mask"], s["op"] == 0x15),
                ("remote_qpn", s["av_qpn"], s["av_qpn"] != 0),
                ("parse_delay_ns", np.maximum(s["ns"] - s["db_ns"], 0), has_db),
                ("doorbell_pi", s["db_pi"] & 0xFFFF, has_db),
                ("peer", S_PEER + s["peer"], s["peer"] >= 0, "s"),
            ]
            if s.has("call"):
                args.append(("call_id", s["call"], s["call"] != 0))
            out.append(self._encode(ts[m], track[m], EV_MLX5_BASE + s["op"].astype(np.int64), args,
                                    [s["flow_out"]] if s.has("flow_out") else [], self._wqe_links(p, s)))
        m = np.flatnonzero(~wqe)
        if len(m):
            s = b.take(m)
            out.append(self._encode(ts[m], track[m], EV_WQE_LOSS, [("first_index", s["aux32"]), ("bbs", s["len"])], [], None))
        self._count(p, b, "wqe")
        self.f.write(b"".join(out))

    def doorbells(self, p: Proc, b: Batch) -> None:
        track = self._tracks(self._describe_qp, p, b["qpn"])
        has_op = b["first_op"] >= 0
        args = [("pi", b["aux32"]), ("bbs", b["len"]), ("wqes", b["n_wqes"]),
                ("op", S_MLX5 + np.maximum(b["first_op"], 0), has_op, "s"),
                ("bytes", b["wqe_bytes"]), ("remote_addr", b["first_raddr"], has_op), ("rkey", b["first_rkey"], has_op),
                ("lost_bbs", b["lost_bbs"], b["lost_bbs"] > 0), ("repeater", b["key"]), ("raw", b["extra"])]
        self.f.write(self._encode(b["ns"], track, EV_DOORBELL, args, [], None))
        self._count(p, b, "doorbell")

    def _post_send(self, p, s, track, rt):
        args = [("qpn", s["qpn"]), ("op", S_WR + _i(s["op"]), None, "s"), ("wrs", s["aux32"]), ("bytes", s["len"]),
                ("remote_addr", s["addr"]), ("rkey", s["key"]), ("wr_id", s["extra"]), ("flags", s["flags"]),
                ("peer", S_PEER + s["peer"], s["peer"] >= 0, "s")]
        return self._encode(s["ns"], track, EV_POST_SEND, args, [], None)

    def _send_wr(self, p, s, track, rt):
        op = s["op"]
        atomic = _WR_ATOMIC[op]
        args = [("qpn", s["qpn"]), ("op", S_WR + _i(op), None, "s"), ("bytes", s["len"]), ("sge", s["aux"]),
                ("remote_addr", s["addr"]), ("rkey", s["key"]), ("wr_id", s["extra"]), ("flags", s["flags"]),
                ("imm", s["aux32"], _WR_IMM[op]),
                ("compare_add", s["cmp"], atomic), ("swap", s["swp"], atomic),
                ("peer", S_PEER + s["peer"], s["peer"] >= 0, "s")]
        return self._encode(s["ns"], track, EV_POST_SEND, args, [s["flow_out"], s["flow_local"]], None)

    def _recv(self, p, s, track, rt):
        # a receive names its QP; an SRQ receive its SRQ (the handle, in aux32)
        first = ("qpn", s["qpn"]) if rt == RT.RECV_WR else ("srq", s["aux32"])
        args = [first, ("bytes", s["len"]), ("sge", s["aux"]), ("addr", s["addr"]), ("lkey", s["key"]),
                ("wr_id", s["extra"])]
        return self._encode(s["ns"], track, EV_POST_RECV if rt == RT.RECV_WR else EV_POST_SRQ_RECV, args, [], None)

    def _completion(self, p, s, track, rt):
        op = s["op"]
        args = [("qpn", s["qpn"]), ("opcode", S_WC + _i(op), None, "s"), ("status", S_STATUS + _i(s["aux"]), None, "s"),
                ("bytes", s["len"]), ("wr_id", s["extra"]), ("imm", s["key"], op == 129),
                ("src_qp", s["aux32"], s["aux32"] != 0), ("peer", S_PEER + s["peer"], s["peer"] >= 0, "s")]
        return self._encode(s["ns"], track, EV_POLL_CQ, args, [], s["flow_in"])

    def _cxi(self, p, s, track, rt):
        track = self._tracks(self._describe_cxi, p, s["qpn"])
        args = [("cq", s["qpn"]), ("cmd_type", S_CXI_TYPE + _i(s["aux"]), None, "s"), ("bytes", s["len"]),
                ("dst_nid", s["key"] >> 12), ("dst_ep", s["key"] & 0xFFF), ("remote_offset", s["addr"]),
                ("local_addr", s["extra"]), ("write_pointer", s["aux32"]), ("site", s["flags"])]
        return self._encode(s["ns"], track, EV_CXI_BASE + s["op"].astype(np.int64), args, [], None)

    def _encode(self, ts, track, name_iid, args, flows_out, flow_in, etype: int = INSTANT,
                count_flows: bool = True) -> bytes:
        """TrackEvents of one type (instants unless said), one per row; args are (name, values[,
        present[, "s" string / "i" signed]]).  `count_flows`: whether the flows started here
        count (a call's count where its WQEs end them)."""
        n = len(track)
        fields: list[pe.Field] = [pe.Bytes(bytes([0x48, etype])), pe.Varint(11, track), pe.Varint(10, name_iid)]
        for a in args:
            name, values = a[0], a[1]
            present = a[2] if len(a) > 2 else None
            kind = a[3] if len(a) > 3 else "u"
            ann = pe.Msg([pe.Bytes(bytes([0x08, ARG[name]])),
                          pe.Varint({"s": 17, "i": 4}.get(kind, 3), np.asarray(values).astype(np.uint64))], n=n)
            fields.append(pe.Nested(4, ann, present))
        for fl in flows_out:
            nz = fl != 0
            if nz.any():
                fields.append(pe.Fixed64(47, fl, nz))
                if count_flows:
                    self.flows += int(nz.sum())
        if flow_in is not None:
            nz = flow_in != 0
            if nz.any():
                fields.append(pe.Fixed64(48, flow_in, nz))
        ev = pe.Msg(fields, n=n)
        pkt = pe.Msg([pe.Varint(8, np.asarray(ts).astype(np.uint64)), pe.Bytes(bytes([0x50, HOT_SEQ, 0x68, SEQ_NEEDS])),
                      pe.Nested(11, ev)], n=n)
        self.events += n
        return pe.encode_repeated(1, pkt)

    # ---- counters ------------------------------------------------------------------------------

    def _hist(self, proc: int, gpu: int, metric: int) -> np.ndarray:
        k = (proc, gpu, metric)
        h = self.counters.get(k)
        if h is None:
            h = self.counters[k] = np.zeros(self.nbins, np.float64)
        return h

    def _add(self, proc, gpu_of_row, ns, weights, metric) -> None:
        bins = np.clip((np.asarray(ns, np.int64) - self.t0) // self.bin_ns, 0, self.nbins - 1)
        u, inv = O.unique_inverse(gpu_of_row)
        for i, g in enumerate(u.tolist()):
            m = slice(None) if len(u) == 1 else inv == i
            self._hist(proc, int(g), metric)[:] += np.bincount(bins[m], weights=None if weights is None else
                                                              np.asarray(weights, np.float64)[m], minlength=self.nbins)

    def _gpu(self, b: Batch) -> np.ndarray:
        ep = b["ep"]
        g = np.full(b.n, -1, np.int64)
        known = ep >= 0
        if known.any():
            g[known] = self.topo.gpu_of[ep[known]]
        return g

    def _count(self, p: Proc, b: Batch, kind: str) -> None:
        if kind == "host":
            m = _POSTED[b["type"]]
            if m.any():
                self._add(p.index, np.full(int(m.sum()), -1), b["ns"][m], b["len"][m], M_BYTES)
        elif kind == "wqe":
            m = b["type"] == RT.WQE
            if m.any():
                ts = np.where(b["db_ns"] >= 0, b["db_ns"], b["ns"])
                self._add(p.index, self._gpu(b)[m], ts[m], b["len"][m], M_BYTES)
        else:
            self._add(p.index, self._gpu(b), b["ns"], None, M_DOORBELLS)

    def _write_counters(self) -> None:
        per_s = 1e9 / self.bin_ns
        for (proc, gpu, metric), h in sorted(self.counters.items()):
            if not h.any():
                continue
            p = self.model.procs[proc]
            parent = self._describe_gpu(p, gpu) if gpu >= 0 or metric == M_DOORBELLS else self.uuid(K_PROC, proc)
            u = self.uuid(K_COUNTER, proc, ((gpu + 1) << 4) | metric)
            td = pb.TrackDescriptor(uuid=u, parent_uuid=parent)
            td.name = "doorbell values seen/s" if metric == M_DOORBELLS else ("bytes/s" if gpu >= 0 else "posted bytes/s")
            td.counter.unit_name = "1/s" if metric == M_DOORBELLS else "B/s"
            self._descriptor(td)
            # one value per change: the first bin, every bin that differs from the one before, and a
            # final zero after the last
            v = h * per_s
            change = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
            ts = self.t0 + change.astype(np.int64) * self.bin_ns
            vals = v[change]
            ts = np.concatenate((ts, [self.t0 + len(v) * self.bin_ns]))
            vals = np.concatenate((vals, [0.0]))
            ev = pe.Msg([pe.Bytes(b"\x48\x04"), pe.Varint(11, np.uint64(u)), pe.Fixed64(44, vals)], n=len(ts))
            pkt = pe.Msg([pe.Varint(8, ts.astype(np.uint64)), pe.Bytes(bytes([0x50, HOT_SEQ, 0x68, SEQ_NEEDS])),
                          pe.Nested(11, ev)], n=len(ts))
            self.f.write(pe.encode_repeated(1, pkt))

    # ---- cold events, notes, end ---------------------------------------------------------------

    def _cold(self) -> int:
        n = 0
        for p in self.model.procs:
            ns = self.model.traces.cold_ns(p)
            for e, t in zip(p.cold, ns.tolist()):
                pkt = pb.TracePacket()
                pkt.timestamp = int(t)
                pkt.trusted_packet_sequence_id = COLD_SEQ
                te = pkt.track_event
                te.type = pb.TrackEvent.TYPE_INSTANT
                tid = e.get("tid")
                if e.get("fn") and isinstance(tid, int):
                    te.track_uuid = self._describe_thread(p, tid)
                    te.name = str(e["fn"])
                else:
                    te.track_uuid = self.uuid(K_PROC, p.index)
                    te.name = str(e.get("ev"))
                te.categories.append("cold")
                for k, v in e.items():
                    if k in ("ts", "tid", "fn"):
                        continue
                    _annotate(te.debug_annotations.add(), k, v)
                self._pb(pkt)
                n += 1
        return n

    def _notes(self, problems: list[Problem]) -> None:
        if not problems:
            return
        u = self.uuid(K_NOTES)
        self._descriptor(pb.TrackDescriptor(uuid=u, name="sigmatrace: skipped input"))
        for pr in problems:
            pkt = pb.TracePacket()
            pkt.timestamp = self.t0
            pkt.trusted_packet_sequence_id = COLD_SEQ
            te = pkt.track_event
            te.type = pb.TrackEvent.TYPE_INSTANT
            te.track_uuid = u
            te.name = str(pr)
            self._pb(pkt)

    def finish(self, problems: list[Problem]) -> dict:
        self._write_counters()
        cold = self._cold()
        self._notes(problems)
        self.f.close()
        return {"format": "perfetto", "path": str(self.path), "events": self.events, "cold_events": cold,
                "flows": self.flows, "bytes": self.path.stat().st_size}

    def describe(self, summary: dict) -> str:
        return (f"{summary['events']:,} events, {summary['flows']:,} flows, "
                f"{summary['cold_events']:,} control-path events")


def _i(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.int64)


def _annotate(a: pb.DebugAnnotation, name: str, v) -> None:
    a.name = name
    if isinstance(v, bool):
        a.bool_value = v
    elif isinstance(v, int):
        if 0 <= v < 2**64:
            a.uint_value = v
        elif -2**63 <= v < 0:
            a.int_value = v
        else:
            a.string_value = str(v)
    elif isinstance(v, float):
        a.double_value = v
    elif isinstance(v, str):
        a.string_value = v
    else:
        import json
        a.string_value = json.dumps(v, sort_keys=True)


class DisplayIds:
    """Perfetto knows processes and threads by pid / tid: keep the real ones where they are
    unique across nodes, give colliding ones fresh numbers above Linux's pid range (the track
    names keep the real ones)."""

    def __init__(self, procs: list[Proc]):
        from collections import Counter
        count = Counter(p.pid for p in procs)
        self._next = 1 << 23
        self._real = {p.index: p.pid for p in procs}
        self.pids: dict[int, int] = {}
        self._owner: dict[int, int] = {}
        for p in procs:
            d = p.pid if count[p.pid] == 1 else self._fresh()
            self.pids[p.index] = d
            self._owner[d] = p.index
        self._tids: dict[tuple[int, int], int] = {}
        for p in procs:
            for t in sorted(p.thread_names()):
                self.tid(p.index, t)

    def _fresh(self) -> int:
        self._next += 1
        return self._next

    def tid(self, proc: int, tid: int) -> int:
        k = (proc, tid)
        d = self._tids.get(k)
        if d is None:
            d = self.pids[proc] if tid == self._real[proc] else tid
            if self._owner.get(d, proc) != proc:
                d = self._fresh()
            self._owner[d] = proc
            self._tids[k] = d
        return d
