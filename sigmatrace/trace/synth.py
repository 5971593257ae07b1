"""Synthetic trace directories with exactly known content, for tests and benchmarks.

The generator plays the part of the runtime: processes on nodes with their own TSC rate, TSC
origin, monotonic origin and calibration jitter; RC queue pairs connected through verbs
(qp_create, qp_modify INIT/RTR/RTS with dest_qpn and dlid/dgid) or devx (devx_qp_create,
devx_qp_modify with remote_qpn/rlid/rgid); a ping-pong in the style of ibv_rc_pingpong (SEND_WR,
RECV_WR, COMPLETION records), RDMA writes, and GPU-initiated writes and atomics seen by a
doorbell repeater (DOORBELL records, WQE / WQE_SEG / WQE_ATOMIC records parsed in deferred
batches, WQE_LOSS).  Events are placed on one true timeline (ns); each process's records carry
its own clocks, so tests can check that exports put every event back at its true time.

Everything is generated with numpy, in calls that can be repeated and flushed to disk as they
go (`flush()`), so a benchmark can build a trace of 100 M records in bounded memory.

    trace = SynthTrace(seed=1)
    a = trace.process("node-a", 1001, tsc_hz=2.4e9)
    b = trace.process("node-b", 2002, tsc_hz=3.0e9, tsc_at_t0=10**12)
    qa, qb = trace.rc_pair(a, b)
    trace.pingpong(qa, qb, iters=100, size=4096)
    dirs = trace.write(tmp_path)            # one trace directory per node
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from . import format as fmt
from . import layers as ly
from . import live as lv
from .writer import FILE_MODE, StreamWriter, create_live, make_dir, write_json

T0_NS = 1_700_000_000_000_000_000   # the true timeline's origin (a realtime in 2023)

# verbs / mlx5 codes used below (sigmatrace.decode.names has the full tables)
WR_RDMA_WRITE, WR_RDMA_WRITE_IMM, WR_SEND, WR_SEND_IMM, WR_RDMA_READ = 0, 1, 2, 3, 4
WC_SEND, WC_RDMA_WRITE, WC_RDMA_READ, WC_RECV, WC_RECV_IMM = 0, 1, 2, 128, 129
MLX5_RDMA_WRITE, MLX5_SEND, MLX5_ATOMIC_FA = 0x08, 0x0A, 0x12
PINGPONG_RECV_WRID, PINGPONG_SEND_WRID = 1, 2   # what ibv_rc_pingpong uses


@dataclass
class NodeClock:
    """How one process reads time, given the true time T (ns since T0_NS)."""

    tsc_hz: float = 2.5e9          # the TSC's real rate
    tsc_at_t0: int = 5 * 10**11    # TSC value at T = 0
    hz_estimate: float | None = None  # what the runtime would have estimated (live block), default nominal
    mono_boot_ns: int = -10**12    # CLOCK_MONOTONIC = T - mono_boot_ns
    real_offset_ns: int = 0        # the node's CLOCK_REALTIME minus true time (PTP error)
    calib_jitter_ns: int = 0       # |error| bound of the realtime read in a calibration triple

    def tsc(self, t_ns: np.ndarray) -> np.ndarray:
        t = np.asarray(t_ns, dtype=np.int64)
        return (self.tsc_at_t0 + np.rint(t.astype(np.float64) * (self.tsc_hz / 1e9)).astype(np.int64)).astype(np.uint64)

    def mono(self, t_ns) -> np.ndarray:
        return (np.asarray(t_ns, dtype=np.int64) - self.mono_boot_ns).astype(np.uint64)

    def real(self, t_ns) -> np.ndarray:
        return (np.asarray(t_ns, dtype=np.int64) + T0_NS + self.real_offset_ns).astype(np.uint64)


def true_realtime(t_ns) -> np.ndarray:
    """The realtime ns a perfect clock would show at true time T."""
    return np.asarray(t_ns, dtype=np.int64) + T0_NS


@dataclass
class Qp:
    proc: "SynthProcess"
    qpn: int
    peer: "Qp | None" = None
    gpu: int = -1
    devx: bool = False
    tid: int = 0           # the thread that posts on it
    sq_pi: int = 0         # basic blocks posted so far (doorbell producer index, unwrapped)
    sq_slots: int = 1024


@dataclass
class Expected:
    """What a generated workload must show after export, accumulated over calls."""

    sends: dict = field(default_factory=lambda: defaultdict(int))         # (pid, qpn) -> send WRs
    recv_completions: dict = field(default_factory=lambda: defaultdict(int))
    send_completions: dict = field(default_factory=lambda: defaultdict(int))
    recv_wrs: dict = field(default_factory=lambda: defaultdict(int))
    flows_send_recv: int = 0      # send -> peer receive completion
    flows_local: int = 0          # signaled WR -> its completion
    bytes: dict = field(default_factory=lambda: defaultdict(int))         # (src pid, dst pid) -> bytes
    ops: dict = field(default_factory=lambda: defaultdict(int))           # (src pid, dst pid) -> ops
    gpu_bytes: dict = field(default_factory=lambda: defaultdict(int))     # ((pid, gpu), (pid, gpu)) -> bytes
    doorbells: dict = field(default_factory=lambda: defaultdict(int))     # (pid, qpn) -> doorbells
    wqes: dict = field(default_factory=lambda: defaultdict(int))          # (pid, qpn) -> recovered WQEs
    wqe_losses: dict = field(default_factory=lambda: defaultdict(int))    # (pid, qpn) -> WQE_LOSS records
    lost_bbs: dict = field(default_factory=lambda: defaultdict(int))
    send_times: dict = field(default_factory=lambda: defaultdict(list))   # (pid, qpn) -> true ns of sends
    cxi: dict = field(default_factory=lambda: defaultdict(int))           # (pid, dst fabric address) -> commands
    calls: dict = field(default_factory=lambda: defaultdict(int))         # (pid, layer, function name) -> calls
    call_bytes: dict = field(default_factory=lambda: defaultdict(int))    # (pid, layer) -> payload bytes of calls
    # (pid, tid, aux32) of a call -> (tid, aux32) of its parent call, or None
    call_parent: dict = field(default_factory=dict)
    # (pid, tid, aux32) of a call -> its children: verbs records (count) and linked WQEs (count)
    call_children: dict = field(default_factory=lambda: defaultdict(int))
    call_wqes: dict = field(default_factory=lambda: defaultdict(int))


class _Stream:
    """Records of one thread waiting to be written, kept as (true ns, record) array pairs."""

    def __init__(self, proc: "SynthProcess", tid: int, name: str, clock: fmt.Clock = fmt.Clock.TSC,
                 file_name: str | None = None):
        self.proc, self.tid, self.name, self.clock = proc, tid, name, clock
        self.file_name = file_name or f"t{tid}.bin"
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.writer: StreamWriter | None = None
        self.written = 0

    def add(self, t_ns: np.ndarray, recs: np.ndarray) -> None:
        if len(recs):
            self.pending.append((np.asarray(t_ns, dtype=np.int64), recs))

    def flush(self, directory: Path) -> None:
        if not self.pending:
            return
        t = np.concatenate([p[0] for p in self.pending])
        recs = np.concatenate([p[1] for p in self.pending])
        self.pending = []
        order = np.argsort(t, kind="stable")
        t, recs = t[order], recs[order]
        c = self.proc.clock
        recs["ts"] = c.tsc(t) if self.clock == fmt.Clock.TSC else c.mono(t)
        if self.writer is None:
            make_dir(directory)
            self.writer = StreamWriter(directory / self.file_name, self.proc.pid, self.tid, self.name, self.clock)
        self.writer.write(recs)
        self.written += len(recs)


def _bswap32(x) -> np.ndarray:
    return np.asarray(x).astype(">u4").view("<u4").astype(np.uint64)


def records(n: int, **fields) -> np.ndarray:
    """`n` records with the given fields (scalars or arrays); seq is assigned when written."""
    r = np.zeros(n, fmt.RECORD_DTYPE)
    for k, v in fields.items():
        r[k] = v
    return r


class SynthProcess:
    def __init__(self, trace: "SynthTrace", host: str, pid: int, clock: NodeClock, mode: str,
                 doorbells: str, start_ns: int, lid: int, gid: str, env: dict):
        self.trace, self.host, self.pid, self.clock, self.mode = trace, host, pid, clock, mode
        self.doorbells = doorbells
        self.start_ns, self.end_ns = start_ns, start_ns
        self.lid, self.gid = lid, gid
        self.env = env
        self.ctx, self.pd = 0x5500_0000 + pid * 0x1000, 0x5600_0000 + pid * 0x1000
        self.cold: list[tuple[int, int, dict]] = []
        self.streams: dict[int, _Stream] = {}
        self.main_tid = pid
        self.threads = {pid: "main"}
        self.calib: list[tuple[int, int, int, int]] = []   # (T, tsc, mono, real) of triples taken
        self.dir: Path | None = None
        # live-block totals, kept as the runtime would
        self.thread_totals: dict[int, dict] = defaultdict(lambda: {
            "calls": np.zeros(lv.CALLS, np.uint64), "ops": np.zeros(lv.OPS, np.uint64),
            "bytes": np.zeros(lv.OPS, np.uint64), "recv_wrs": 0, "recv_bytes": 0, "completions": 0,
            "completion_errors": 0, "records": 0, "qps": {}, "layer_retries": np.zeros(3, np.uint64)})
        self.qp_totals: dict[int, dict] = {}
        self.repeaters: dict[int, dict] = {}
        self.call_seq: dict[int, int] = defaultdict(int)     # tid -> CALL records' aux32 so far
        self.records_dropped = 0
        self._opened = False

    def stream(self, tid: int, name: str = "", clock: fmt.Clock = fmt.Clock.TSC, file_name: str | None = None) -> _Stream:
        key = file_name or tid
        s = self.streams.get(key)
        if s is None:
            s = _Stream(self, tid, name or self.threads.get(tid, f"t{tid}"), clock, file_name)
            self.streams[key] = s
            self.threads.setdefault(tid, s.name)
        return s

    def cold_event(self, t_ns: int, ev: str, tid: int | None = None, **fields) -> None:
        self.cold.append((int(t_ns), tid or self.main_tid, {"ev": ev, **fields}))
        self.end_ns = max(self.end_ns, int(t_ns))

    def calibrate(self, t_ns: int, record: bool = True) -> None:
        """Take a calibration triple at true time t (a CALIB record in the main stream)."""
        rng = self.trace.rng
        j = self.clock.calib_jitter_ns
        err_real = int(rng.integers(-j, j + 1)) if j else 0
        err_mono = int(rng.integers(-j, j + 1)) if j else 0
        tsc = int(self.clock.tsc([t_ns])[0])
        mono = int(self.clock.mono([t_ns + err_mono])[0])
        real = int(self.clock.real([t_ns + err_real])[0])
        self.calib.append((t_ns, tsc, mono, real))
        if record and self.mode != "aggregate":
            r = records(1, type=fmt.RecType.CALIB, addr=mono, extra=real)
            self.stream(self.main_tid).add([t_ns], r)
            self.thread_totals[self.main_tid]["records"] += 1

    def count_records(self, tid: int, n: int) -> None:
        self.thread_totals[tid]["records"] += n


class SynthTrace:
    """A set of synthetic processes on one true timeline; see the module docstring."""

    def __init__(self, seed: int = 0, keep_times: bool = True):
        self.rng = np.random.default_rng(seed)
        self.procs: list[SynthProcess] = []
        self.expected = Expected()
        self.keep_times = keep_times      # False for benchmarks: no per-event truth kept in memory
        self._next_qpn = 0x100
        self._root: Path | None = None
        self._layout = "host"

    # ---- processes and connections -----------------------------------------------------------

    def process(self, host: str, pid: int, *, tsc_hz: float = 2.5e9, tsc_at_t0: int = 5 * 10**11,
                hz_estimate: float | None = None, mono_boot_ns: int = -10**12, real_offset_ns: int = 0,
                calib_jitter_ns: int = 0, mode: str = "full", doorbells: str = "wqe", start_ns: int = 1_000_000,
                lid: int | None = None, gid: str | None = None, env: dict | None = None) -> SynthProcess:
        clock = NodeClock(tsc_hz, tsc_at_t0, hz_estimate, mono_boot_ns, real_offset_ns, calib_jitter_ns)
        n = len(self.procs) + 1
        p = SynthProcess(self, host, pid, clock, mode, doorbells, start_ns,
                         lid if lid is not None else n, gid or f"fe800000000000000200c9fffe{n:06x}", env or {})
        self.procs.append(p)
        p.calibrate(start_ns, record=True)
        p.cold_event(start_ns + 1000, "dev_open", fn="ibv_open_device", ret=p.ctx, ctx=p.ctx, dev="mlx5_0",
                     guid=0x0200C9FFFE000000 + n)
        p.cold_event(start_ns + 2000, "port_info", fn="ibv_query_port", ret=0, ctx=p.ctx, port=1, lid=p.lid,
                     gid=p.gid, link_layer="IB")
        p.cold_event(start_ns + 3000, "pd_alloc", fn="ibv_alloc_pd", ret=p.pd, ctx=p.ctx, pd=p.pd)
        return p

    def _qpn(self) -> int:
        self._next_qpn += 1 + int(self.rng.integers(0, 3))
        return self._next_qpn

    def rc_pair(self, a: SynthProcess, b: SynthProcess, t_ns: int | None = None, qpn_a: int | None = None,
                qpn_b: int | None = None, tid_a: int | None = None, tid_b: int | None = None) -> tuple[Qp, Qp]:
        """Two RC QPs connected through verbs, with the cold events both sides would record."""
        t = t_ns if t_ns is not None else max(a.end_ns, b.end_ns) + 10_000
        qa = Qp(a, qpn_a or self._qpn(), tid=tid_a or a.main_tid)
        qb = Qp(b, qpn_b or self._qpn(), tid=tid_b or b.main_tid)
        qa.peer, qb.peer = qb, qa
        for q in (qa, qb):
            p, r = q.proc, q.peer
            h = 0x5700_0000 + q.qpn * 0x100
            p.cold_event(t, "cq_create", fn="ibv_create_cq", ret=h + 1, ctx=p.ctx, cq=h + 1, cqe=1000, channel=0)
            p.cold_event(t + 100, "qp_create", fn="ibv_create_qp", ret=h, ctx=p.ctx, pd=p.pd, qp=h, qpn=q.qpn,
                         type="RC", send_cq=h + 1, recv_cq=h + 1, srq=0, max_send_wr=1, max_recv_wr=500,
                         max_send_sge=1, max_recv_sge=1, max_inline_data=0)
            p.cold_event(t + 200, "mr_reg", fn="ibv_reg_mr", ret=h + 2, pd=p.pd, mr=h + 2, addr=0x7F00_0000_0000 + q.qpn * 0x10000,
                         len=65536, iova=0x7F00_0000_0000 + q.qpn * 0x10000, access=7, lkey=q.qpn * 16 + 1, rkey=q.qpn * 16 + 2)
            p.cold_event(t + 300, "qp_modify", fn="ibv_modify_qp", ret=0, qpn=q.qpn, mask=0x39, state="INIT", port=1,
                         access=7)
            p.cold_event(t + 5000, "qp_modify", fn="ibv_modify_qp", ret=0, qpn=q.qpn, mask=0x1f81, state="RTR",
                         dest_qpn=r.qpn, dlid=r.proc.lid, dgid=r.proc.gid, sgid_index=0, sl=0, path_mtu=5, rq_psn=0)
            p.cold_event(t + 6000, "qp_modify", fn="ibv_modify_qp", ret=0, qpn=q.qpn, mask=0x3d481, state="RTS", sq_psn=0)
            p.threads.setdefault(q.tid, f"t{q.tid}")
        return qa, qb

    def gpu_pair(self, a: SynthProcess, b: SynthProcess, gpu_a: int = 0, gpu_b: int = 0,
                 t_ns: int | None = None, sq_slots: int = 1024) -> tuple[Qp, Qp]:
        """Two RC QPs made through devx with their send queues in GPU memory (GPU-initiated)."""
        t = t_ns if t_ns is not None else max(a.end_ns, b.end_ns) + 10_000
        qa = Qp(a, self._qpn(), gpu=gpu_a, devx=True, sq_slots=sq_slots)
        qb = Qp(b, self._qpn(), gpu=gpu_b, devx=True, sq_slots=sq_slots)
        qa.peer, qb.peer = qb, qa
        for q in (qa, qb):
            p, r = q.proc, q.peer
            obj = 0x5800_0000 + q.qpn * 0x100
            uar = 0x5900_0000 + q.gpu * 0x100
            rep = q.gpu if q.gpu >= 0 else 0
            if rep not in p.repeaters:
                p.repeaters[rep] = {"tid": p.pid + 100 + rep, "doorbells": 0, "uar": 0x7E00_0000_0800 + rep * 0x1000}
                p.threads[p.pid + 100 + rep] = f"st-repeater{rep}"
                p.cold_event(t, "devx_uar_alloc", fn="mlx5dv_devx_alloc_uar", ret=uar, ctx=p.ctx, uar=uar,
                             reg_addr=p.repeaters[rep]["uar"], base_addr=p.repeaters[rep]["uar"] - 0x800, page_id=rep + 1, flags=1)
                p.cold_event(t + 50, "repeater_start", repeater=rep, uar_reg_addr=p.repeaters[rep]["uar"],
                             fake_host=0x7D00_0000_0000 + rep * 0x1000, fake_dptr=0x7C00_0000_0000 + rep * 0x1000, cpu=1)
            q.tid = p.repeaters[rep]["tid"]
            p.cold_event(t + 100, "devx_umem_reg", fn="mlx5dv_devx_umem_reg", ret=obj + 1, ctx=p.ctx, umem=obj + 1,
                         umem_id=q.qpn & 0xFFF, addr=0x7B00_0000_0000 + q.qpn * 0x100000, size=1 << 20, access=7,
                         mem="gpu", gpu=q.gpu)
            p.cold_event(t + 200, "devx_qp_create", fn="mlx5dv_devx_obj_create", ret=obj, obj=obj, qpn=q.qpn, st="RC",
                         pd=p.pd, log_sq_size=int(np.log2(sq_slots)), sq_slots=sq_slots, sq_addr=0x7B00_0000_0000 + q.qpn * 0x100000,
                         sq_umem_id=q.qpn & 0xFFF, sq_umem_offset=0, dbr_addr=0, dbr_umem_id=q.qpn & 0xFFF,
                         uar_page=rep + 1, cqn_snd=q.qpn + 0x1000, cqn_rcv=q.qpn + 0x1000, gpu=q.gpu)
            p.cold_event(t + 300, "devx_qp_modify", fn="mlx5dv_devx_obj_modify", ret=0, obj=obj, qpn=q.qpn, op="RST2INIT")
            p.cold_event(t + 5000, "devx_qp_modify", fn="mlx5dv_devx_obj_modify", ret=0, obj=obj, qpn=q.qpn,
                         op="INIT2RTR", remote_qpn=r.qpn, rlid=r.proc.lid, rgid=r.proc.gid)
            p.cold_event(t + 6000, "devx_qp_modify", fn="mlx5dv_devx_obj_modify", ret=0, obj=obj, qpn=q.qpn, op="RTR2RTS")
            p.qp_totals[q.qpn] = {"gpu": q.gpu, "repeater": rep, "sq_slots": sq_slots, "remote_qpn": r.qpn,
                                  "doorbells": 0, "pi": 0, "wqes": 0, "losses": 0, "bytes": 0,
                                  "ops": np.zeros(lv.MLX5_OPS, np.uint64), "op_bytes": np.zeros(lv.MLX5_OPS, np.uint64)}
        return qa, qb

    # ---- workloads ----------------------------------------------------------------------------

    def pingpong(self, qa: Qp, qb: Qp, iters: int, size: int = 4096, start_ns: int | None = None,
                 period_ns: int = 4000, latency_ns: int = 1500, rx_depth: int = 16) -> int:
        """`iters` round trips qa -> qb -> qa of `size`-byte SENDs; returns the end time.

        Like ibv_rc_pingpong: each side pre-posts `rx_depth` receives and reposts one per receive
        completion; every send is signaled."""
        a, b = qa.proc, qb.proc
        t0 = start_ns if start_ns is not None else max(a.end_ns, b.end_ns) + 10_000
        i = np.arange(iters, dtype=np.int64)
        t_send_a = t0 + i * period_ns
        t_recv_b = t_send_a + latency_ns
        t_send_b = t_recv_b + 200
        t_recv_a = t_send_b + latency_ns
        for q in (qa, qb):
            self._prepost(q, t0 - 2000, rx_depth, size)
        self._sends(qa, t_send_a, size, WR_SEND, signaled=True, wr_id=PINGPONG_SEND_WRID)
        self._sends(qb, t_send_b, size, WR_SEND, signaled=True, wr_id=PINGPONG_SEND_WRID)
        self._recv_side(qb, t_recv_b, size)
        self._recv_side(qa, t_recv_a, size)
        end = int(t_recv_a[-1]) + 1000 if iters else t0
        a.end_ns, b.end_ns = max(a.end_ns, end), max(b.end_ns, end)
        return end

    def rdma_writes(self, q: Qp, n: int, size: int = 65536, start_ns: int | None = None, period_ns: int = 2000,
                    signal_every: int = 4, op: int = WR_RDMA_WRITE) -> int:
        """`n` RDMA writes (or reads, with op=WR_RDMA_READ) on q, every `signal_every`-th signaled."""
        p = q.proc
        t0 = start_ns if start_ns is not None else p.end_ns + 10_000
        t = t0 + np.arange(n, dtype=np.int64) * period_ns
        signaled = (np.arange(n) % signal_every) == signal_every - 1
        self._sends(q, t, size, op, signaled=signaled, wr_id=1000 + np.arange(n))
        p.end_ns = max(p.end_ns, int(t[-1]) + 5000) if n else p.end_ns
        return p.end_ns

    def gpu_ops(self, q: Qp, n: int, size: int = 8192, start_ns: int | None = None, period_ns: int = 500,
                batch_doorbells: int = 8, lose_batches: tuple[int, ...] = (), parse_delay_ns: int = 3000,
                sends: bool = False, latency_ns: int = 1500) -> int:
        """`n` GPU-posted WQEs on q (a cycle of RDMA_WRITE, 3-segment RDMA_WRITE over two basic
        blocks, ATOMIC_FA; or, with `sends`, SENDs that the peer receives `latency_ns` after their
        doorbell), rung in doorbells of 1-3 WQEs; the repeater records every doorbell and parses
        WQEs every `batch_doorbells` doorbells (batches in `lose_batches` are lost)."""
        p = q.proc
        t0 = start_ns if start_ns is not None else p.end_ns + 10_000
        kind = np.full(n, 3) if sends else np.arange(n) % 3
        ds = np.array([3, 5, 4, 2])[kind]
        nbb = (ds + 3) // 4
        segs = np.array([1, 3, 1, 1])[kind]
        op = np.array([MLX5_RDMA_WRITE, MLX5_RDMA_WRITE, MLX5_ATOMIC_FA, MLX5_SEND])[kind]
        nbytes = np.array([size, 3 * size, 8, size], np.int64)[kind]
        start_bb = q.sq_pi + np.concatenate(([0], np.cumsum(nbb)[:-1]))
        t_wqe = t0 + np.arange(n, dtype=np.int64) * period_ns
        # doorbells of 1, 2, 3 WQEs in turn
        sizes = np.tile(np.array([1, 2, 3]), n // 6 + 2)
        cum = np.cumsum(sizes)
        nd = int(np.searchsorted(cum, n)) + 1
        sizes = sizes[:nd].copy()
        sizes[-1] = n - (int(cum[nd - 2]) if nd > 1 else 0)
        first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        last = first + sizes - 1
        db_pi = start_bb[last] + nbb[last]
        db_prev = start_bb[first]
        t_db = t_wqe[last] + 100
        rep = p.qp_totals[q.qpn]["repeater"]
        tid = p.repeaters[rep]["tid"]
        st = p.stream(tid, f"st-repeater{rep}")
        # the 8 bytes NVSHMEM stores, {be32(pi << 8), be32(qpn << 8)}, read as a little-endian u64
        raw = _bswap32((db_pi & 0xFFFF) << 8) | (_bswap32(np.full(nd, q.qpn << 8)) << np.uint64(32))
        st.add(t_db, records(nd, type=fmt.RecType.DOORBELL, qpn=q.qpn, aux32=db_pi & 0xFFFF,
                             len=db_pi - db_prev, extra=raw, key=rep))
        # deferred parse: after every batch_doorbells-th doorbell (and at the end)
        bounds = list(range(batch_doorbells, nd, batch_doorbells)) + [nd]
        prev = 0
        lost_wqe = np.zeros(n, bool)
        for bi, bend in enumerate(bounds):
            t_parse = t_db[bend - 1] + parse_delay_ns
            w = np.arange(first[prev], last[bend - 1] + 1)
            if bi in lose_batches:
                lost_wqe[w] = True
                bbs = int(nbb[w].sum())
                st.add([t_parse], records(1, type=fmt.RecType.WQE_LOSS, qpn=q.qpn, aux32=int(start_bb[w[0]]) & 0xFFFF, len=bbs))
                self.expected.wqe_losses[(p.pid, q.qpn)] += 1
                self.expected.lost_bbs[(p.pid, q.qpn)] += bbs
                p.qp_totals[q.qpn]["losses"] += 1
                p.count_records(tid, 1)
            else:
                self._wqe_records(st, q, w, t_parse, op, ds, nbytes, segs, start_bb, size)
            prev = bend
        ok = ~lost_wqe
        q.sq_pi += int(nbb.sum())
        e = self.expected
        e.doorbells[(p.pid, q.qpn)] += nd
        e.wqes[(p.pid, q.qpn)] += int(ok.sum())
        r = q.peer
        e.bytes[(p.pid, r.proc.pid)] += int(nbytes[ok].sum())
        e.ops[(p.pid, r.proc.pid)] += int(ok.sum())
        e.gpu_bytes[((p.pid, q.gpu), (r.proc.pid, r.gpu))] += int(nbytes[ok].sum())
        tot = p.qp_totals[q.qpn]
        tot["doorbells"] += nd
        tot["pi"] = q.sq_pi
        tot["wqes"] += int(ok.sum())
        tot["bytes"] += int(nbytes[ok].sum())
        np.add.at(tot["ops"], op[ok], 1)
        np.add.at(tot["op_bytes"], op[ok], nbytes[ok])
        p.repeaters[rep]["doorbells"] += nd
        p.count_records(tid, nd)
        p.end_ns = max(p.end_ns, int(t_db[-1]) + parse_delay_ns + 1000)
        if sends:
            # each SEND completes a receive on the peer, after the doorbell that carried it
            self._recv_side(r, np.repeat(t_db, sizes) + latency_ns, size)
            r.proc.end_ns = max(r.proc.end_ns, int(t_db[-1]) + latency_ns + 1000)
        return p.end_ns

    def cxi_cmds(self, p: SynthProcess, n: int, tid: int | None = None, cq: int = 3, dst_nid: int = 0x41,
                 dst_ep: int = 7, size: int = 4096, start_ns: int | None = None, period_ns: int = 1000) -> int:
        """`n` libcxi PUT commands rung one per doorbell, as the eBPF loader records them: a
        cxi-<tid>.bin stream in CLOCK_MONOTONIC."""
        t0 = start_ns if start_ns is not None else p.end_ns + 10_000
        t = t0 + np.arange(n, dtype=np.int64) * period_ns
        tid = tid or p.main_tid
        st = p.stream(tid, "cxi", fmt.Clock.MONOTONIC, file_name=f"cxi-{tid}.bin")
        st.add(t, records(n, type=fmt.RecType.CXI_CMD, qpn=cq, op=1, aux=1, len=size, key=(dst_nid << 12) | dst_ep,
                          addr=np.arange(n, dtype=np.uint64) * size, extra=0x7700_0000_0000, aux32=np.arange(n) + 1,
                          flags=0))
        self.expected.cxi[(p.pid, (dst_nid << 12) | dst_ep)] += n
        p.end_ns = max(p.end_ns, int(t[-1]) + 1000) if n else p.end_ns
        return p.end_ns

    # ---- provider layers above verbs (CALL / CALL_END) ---------------------------------------------

    def cpu_queue(self, q: Qp, doorbells: bool = True) -> None:
        """Make q's send queue one the program's CPU writes itself (UCX rc_mlx5 after
        mlx5dv_init_obj): its WQEs are recorded by a repeater thread (with DOORBELL records when
        `doorbells`), its live-block row is flagged CPU_SQ."""
        p = q.proc
        rep = 0
        if rep not in p.repeaters:
            p.repeaters[rep] = {"tid": p.pid + 100, "doorbells": 0, "uar": 0x7E00_0000_0800}
            p.threads[p.pid + 100] = "st-repeater0"
        flags = lv.QpFlag.VERBS | lv.QpFlag.CPU_SQ | (lv.QpFlag.WATCHED if doorbells else 0)
        p.qp_totals[q.qpn] = {"gpu": -1, "repeater": rep if doorbells else 0xFFFFFFFF, "sq_slots": q.sq_slots,
                              "remote_qpn": q.peer.qpn, "doorbells": 0, "pi": 0, "wqes": 0, "losses": 0, "bytes": 0,
                              "ops": np.zeros(lv.MLX5_OPS, np.uint64), "op_bytes": np.zeros(lv.MLX5_OPS, np.uint64),
                              "flags": int(flags), "cpu_doorbells": doorbells}

    def call(self, p: SynthProcess, tid: int, t_ns: int, layer: int, op: int, *, nested: bool = False,
             ep: int = 0, size: int = 0, raddr: int = 0, rkey: int = 0, qpn: int = 0) -> int:
        """A CALL record; returns its aux32 (the call's number on the thread)."""
        p.call_seq[tid] += 1
        k = p.call_seq[tid]
        p.end_ns = max(p.end_ns, int(t_ns) + 1000)
        if p.mode == "aggregate":          # counted in the live block only
            return k
        p.stream(tid).add([t_ns], records(1, type=fmt.RecType.CALL, aux=layer, op=op, extra=ep, len=size, addr=raddr,
                                          key=rkey & 0xFFFFFFFF, qpn=qpn, aux32=k,
                                          flags=fmt.RecFlag.NESTED if nested else 0))
        p.count_records(tid, 1)
        p.end_ns = max(p.end_ns, int(t_ns) + 1000)
        return k

    def call_end(self, p: SynthProcess, tid: int, t_ns: int, layer: int, op: int, k: int, *, ret: int = 0,
                 err: bool = False, qpn: int = 0, dest: int = 0, wqe_range: tuple[int, int] | None = None,
                 tries: int = 0) -> None:
        p.end_ns = max(p.end_ns, int(t_ns) + 1000)
        if p.mode == "aggregate":
            return
        extra = 0
        if wqe_range is not None:
            extra = ly.WQE_RANGE_VALID | (wqe_range[0] & 0xFFFF) | ((wqe_range[1] & 0xFFFF) << 16)
        p.stream(tid).add([t_ns], records(1, type=fmt.RecType.CALL_END, aux=layer, op=op, aux32=k, key=ret & 0xFFFFFFFF,
                                          qpn=qpn, addr=dest, extra=np.uint64(extra), len=tries,
                                          flags=fmt.RecFlag.ERR if err else 0))
        p.count_records(tid, 1)
        p.end_ns = max(p.end_ns, int(t_ns) + 1000)

    def ucx_puts(self, q: Qp, n: int, size: int = 64, wqes_per_call: int = 1, start_ns: int | None = None,
                 period_ns: int = 3000, parse_every: int = 4, ucp: bool = True, sends: bool = False,
                 tries: int = 0) -> int:
        """`n` ucp_put_nbx calls (with `ucp`; else UCT alone) on the caller's thread, each
        enclosing one uct_ep_put_short on q (a cpu_queue) whose CALL_END names the WQEs it wrote:
        `wqes_per_call` RDMA_WRITE WQEs of one basic block each, rung by one doorbell, parsed by
        the repeater every `parse_every` calls.  With `sends`: ucp_am_send_nbx / uct_ep_am_short
        writing SEND WQEs, each received by the peer (full mode) 1500 ns after its doorbell.
        `tries`: each UCT call was tried that many times before, refused ("no resource"), the
        tries folded into it as the runtime does (its CALL_END's len, the live block's count)."""
        fn_ucp, fn_uct, opcode = (9, 6, MLX5_SEND) if sends else (1, 1, MLX5_RDMA_WRITE)
        name_ucp, name_uct = ly.function_name(ly.Layer.UCP, fn_ucp), ly.function_name(ly.Layer.UCT, fn_uct)
        p = q.proc
        tot = p.qp_totals[q.qpn]
        tid = p.main_tid
        rep_tid = p.repeaters[0]["tid"]
        rst = p.stream(rep_tid, "st-repeater0")
        t0 = start_ns if start_ns is not None else p.end_ns + 10_000
        ep_ucp, ep_uct = 0x5A00_0000 + q.qpn, 0x5B00_0000 + q.qpn
        raddr = 0x6000_0000_0000 + q.peer.qpn * 0x100000
        rkey = q.peer.qpn * 16 + 2
        e = self.expected
        tt = p.thread_totals[tid]
        parse_at = []
        pending: list[tuple[int, int]] = []       # (first WQE index, count) not parsed yet
        for i in range(n):
            t = t0 + i * period_ns
            ku = None
            if ucp:
                ku = self.call(p, tid, t, ly.Layer.UCP, fn_ucp, ep=ep_ucp, size=size * wqes_per_call, raddr=raddr,
                               rkey=rkey)
            kt = self.call(p, tid, t + 100, ly.Layer.UCT, fn_uct, nested=ucp, ep=ep_uct, size=size * wqes_per_call,
                           raddr=raddr, rkey=rkey, qpn=q.qpn)
            pi0 = q.sq_pi
            q.sq_pi += wqes_per_call
            if tot.get("cpu_doorbells", True):
                raw = int(_bswap32([(q.sq_pi & 0xFFFF) << 8])[0]) | (int(_bswap32([q.qpn << 8])[0]) << 32)
                rst.add([t + 200], records(1, type=fmt.RecType.DOORBELL, qpn=q.qpn, aux32=q.sq_pi & 0xFFFF,
                                           len=wqes_per_call, extra=np.uint64(raw), key=0))
                p.count_records(rep_tid, 1)
                tot["doorbells"] += 1
                p.repeaters[0]["doorbells"] += 1
            self.call_end(p, tid, t + 300, ly.Layer.UCT, fn_uct, kt, qpn=q.qpn, wqe_range=(pi0, q.sq_pi), tries=tries)
            if sends:
                self._recv_side(q.peer, np.full(wqes_per_call, t + 200 + 1500, np.int64), size)
            if ucp:
                self.call_end(p, tid, t + 400, ly.Layer.UCP, fn_ucp, ku)
                e.calls[(p.pid, "ucp", name_ucp)] += 1
                e.call_bytes[(p.pid, "ucp")] += size * wqes_per_call
                e.call_parent[(p.pid, tid, ku)] = None
                tt["calls"][lv.Call.UCP] += 1
            e.calls[(p.pid, "uct", name_uct)] += 1
            e.call_bytes[(p.pid, "uct")] += size * wqes_per_call
            e.call_parent[(p.pid, tid, kt)] = (tid, ku) if ucp else None
            e.call_wqes[(p.pid, tid, kt)] += wqes_per_call
            tt["calls"][lv.Call.UCT] += 1 + tries
            tt["layer_retries"][ly.Layer.UCT - 1] += tries
            pending.append((pi0, wqes_per_call, kt))
            if len(pending) == parse_every or i == n - 1:
                t_parse = t + 2000
                for first, cnt, _ in pending:
                    w = np.arange(first, first + cnt)
                    recs = np.zeros(2 * cnt, fmt.RECORD_DTYPE)
                    recs["type"][0::2] = fmt.RecType.WQE
                    recs["qpn"] = q.qpn
                    recs["aux32"][0::2] = w & 0xFFFF
                    recs["aux32"][1::2] = w & 0xFFFF
                    recs["op"][0::2] = opcode
                    recs["aux"][0::2] = 3
                    recs["flags"][0::2] = fmt.RecFlag.SIGNALED
                    recs["len"][0::2] = size
                    recs["addr"][0::2] = raddr + w.astype(np.uint64) * size
                    recs["key"][0::2] = rkey
                    recs["type"][1::2] = fmt.RecType.WQE_SEG
                    recs["flags"][1::2] = fmt.RecFlag.CONT
                    recs["addr"][1::2] = 0x7A00_0000_0000 + w.astype(np.uint64) * size
                    recs["key"][1::2] = q.qpn * 16 + 1
                    recs["len"][1::2] = size
                    rst.add(np.full(2 * cnt, t_parse, np.int64), recs)
                    p.count_records(rep_tid, 2 * cnt)
                pending = []
        total = n * wqes_per_call
        tot["pi"] = q.sq_pi
        tot["wqes"] += total
        tot["bytes"] += total * size
        tot["ops"][opcode] += total
        tot["op_bytes"][opcode] += total * size
        e.wqes[(p.pid, q.qpn)] += total
        if tot.get("cpu_doorbells", True):
            e.doorbells[(p.pid, q.qpn)] += n
        e.bytes[(p.pid, q.peer.proc.pid)] += total * size
        e.ops[(p.pid, q.peer.proc.pid)] += total
        p.end_ns = max(p.end_ns, t0 + n * period_ns + 5000)
        return p.end_ns

    def ucx_verbs_puts(self, q: Qp, n: int, size: int = 1024, start_ns: int | None = None,
                       period_ns: int = 3000) -> int:
        """`n` ucp_put_nbx calls through UCT's rc_verbs transport: each UCP call encloses a
        uct_ep_put_zcopy (no WQE range: the queue is libibverbs') that encloses the verbs RDMA
        write it posted (SEND_WR in full mode, POST_SEND in simple mode), unsignaled."""
        p = q.proc
        tid = q.tid
        t0 = start_ns if start_ns is not None else p.end_ns + 10_000
        t = t0 + np.arange(n, dtype=np.int64) * period_ns
        raddr, rkey = 0x7F00_0000_0000 + q.peer.qpn * 0x10000, q.peer.qpn * 16 + 2
        e = self.expected
        tt = p.thread_totals[tid]
        for i in range(n):
            ku = self.call(p, tid, int(t[i]), ly.Layer.UCP, 1, ep=0x5D00_0000 + q.qpn, size=size, raddr=raddr, rkey=rkey)
            kt = self.call(p, tid, int(t[i]) + 100, ly.Layer.UCT, 3, nested=True, ep=0x5E00_0000 + q.qpn, size=size,
                           raddr=raddr, rkey=rkey, qpn=q.qpn)
            self.call_end(p, tid, int(t[i]) + 300, ly.Layer.UCT, 3, kt, qpn=q.qpn)
            self.call_end(p, tid, int(t[i]) + 400, ly.Layer.UCP, 1, ku)
            e.call_parent[(p.pid, tid, ku)] = None
            e.call_parent[(p.pid, tid, kt)] = (tid, ku)
            e.call_children[(p.pid, tid, kt)] += 1
        self._sends(q, t + 200, size, WR_RDMA_WRITE, signaled=False, wr_id=7000 + np.arange(n))
        e.calls[(p.pid, "ucp", "ucp_put_nbx")] += n
        e.calls[(p.pid, "uct", "uct_ep_put_zcopy")] += n
        e.call_bytes[(p.pid, "ucp")] += n * size
        e.call_bytes[(p.pid, "uct")] += n * size
        tt["calls"][lv.Call.UCP] += n
        tt["calls"][lv.Call.UCT] += n
        p.end_ns = max(p.end_ns, int(t[-1]) + 5000) if n else p.end_ns
        return p.end_ns

    def fi_writes(self, q: Qp, n: int, size: int = 4096, start_ns: int | None = None, period_ns: int = 3000,
                  dest: int = 1) -> int:
        """`n` fi_writemsg calls on q's thread, each enclosing the verbs RDMA write it posted
        (SEND_WR in full mode, POST_SEND in simple mode), signaled."""
        p = q.proc
        tid = q.tid
        t0 = start_ns if start_ns is not None else p.end_ns + 10_000
        t = t0 + np.arange(n, dtype=np.int64) * period_ns
        ep = 0x5C00_0000 + q.qpn
        raddr = 0x7F00_0000_0000 + q.peer.qpn * 0x10000
        e = self.expected
        for i in range(n):
            k = self.call(p, tid, int(t[i]), ly.Layer.LIBFABRIC, 12, ep=ep, size=size, raddr=raddr,
                          rkey=q.peer.qpn * 16 + 2, qpn=q.qpn)
            self.call_end(p, tid, int(t[i]) + 300, ly.Layer.LIBFABRIC, 12, k, qpn=q.qpn, dest=dest)
            e.call_parent[(p.pid, tid, k)] = None
            e.call_children[(p.pid, tid, k)] += 1 if p.mode != "aggregate" else 0
        self._sends(q, t + 100, size, WR_RDMA_WRITE, signaled=True, wr_id=5000 + np.arange(n))
        e.calls[(p.pid, "libfabric", "fi_writemsg")] += n
        e.call_bytes[(p.pid, "libfabric")] += n * size
        p.thread_totals[tid]["calls"][lv.Call.LIBFABRIC] += n
        p.end_ns = max(p.end_ns, int(t[-1]) + 5000) if n else p.end_ns
        return p.end_ns

    def _wqe_records(self, st: _Stream, q: Qp, w: np.ndarray, t_parse: int, op, ds, nbytes, segs, start_bb, size) -> None:
        """WQE records (each followed by its WQE_SEG and WQE_ATOMIC records) for WQEs `w`."""
        per = segs[w] + 1 + (op[w] == MLX5_ATOMIC_FA)
        total = int(per.sum())
        recs = np.zeros(total, fmt.RECORD_DTYPE)
        head = np.concatenate(([0], np.cumsum(per)[:-1]))
        recs["type"][head] = fmt.RecType.WQE
        recs["qpn"][head] = q.qpn
        recs["aux32"][head] = start_bb[w] & 0xFFFF
        recs["op"][head] = op[w]
        recs["aux"][head] = ds[w]
        recs["flags"][head] = fmt.RecFlag.SIGNALED
        recs["len"][head] = nbytes[w]
        recs["addr"][head] = 0x6000_0000_0000 + q.peer.qpn * 0x100000 + (w * 64)
        recs["key"][head] = q.peer.qpn * 16 + 2
        # the WQE_SEG records after each WQE, then WQE_ATOMIC for atomics
        ns = segs[w]
        owner = np.repeat(np.arange(len(w)), ns)
        j = np.arange(int(ns.sum())) - np.repeat(np.cumsum(ns) - ns, ns)
        rows = head[owner] + 1 + j
        atomic_w = op[w][owner] == MLX5_ATOMIC_FA
        recs["type"][rows] = fmt.RecType.WQE_SEG
        recs["flags"][rows] = fmt.RecFlag.CONT
        recs["aux"][rows] = j
        recs["addr"][rows] = 0x7A00_0000_0000 + w[owner].astype(np.uint64) * 0x10000 + j.astype(np.uint64) * 0x1000
        recs["key"][rows] = q.qpn * 16 + 1
        recs["len"][rows] = np.where(atomic_w, 8, size)
        at = np.flatnonzero(op[w] == MLX5_ATOMIC_FA)
        arow = head[at] + 1 + ns[at]
        recs["type"][arow] = fmt.RecType.WQE_ATOMIC
        recs["flags"][arow] = fmt.RecFlag.CONT
        recs["extra"][arow] = 1          # fetch-and-add 1
        st.add(np.full(total, t_parse, np.int64), recs)
        q.proc.count_records(st.tid, total)

    def _prepost(self, q: Qp, t_ns: int, n: int, size: int) -> None:
        p = q.proc
        if p.mode != "full":
            return
        st = p.stream(q.tid)
        t = t_ns + np.arange(n, dtype=np.int64)
        st.add(t, records(n, type=fmt.RecType.RECV_WR, qpn=q.qpn, aux=1, len=size,
                          addr=0x7F00_0000_0000 + q.qpn * 0x10000, key=q.qpn * 16 + 1, extra=PINGPONG_RECV_WRID))
        self._count_recv(q, n, size)

    def _count_recv(self, q: Qp, n: int, size: int) -> None:
        p = q.proc
        tt = p.thread_totals[q.tid]
        tt["calls"][lv.Call.POST_RECV] += n
        tt["recv_wrs"] += n
        tt["recv_bytes"] += n * size
        p.count_records(q.tid, n)
        self.expected.recv_wrs[(p.pid, q.qpn)] += n

    def _sends(self, q: Qp, t: np.ndarray, size: int, op: int, signaled, wr_id) -> None:
        """Send-side records: SEND_WR (full) or POST_SEND (simple), and the send completions of
        signaled WRs (full)."""
        p, r = q.proc, q.peer
        n = len(t)
        sig = np.broadcast_to(np.asarray(signaled, bool), (n,))
        flags = np.where(sig, fmt.RecFlag.SIGNALED, 0).astype(np.uint8)
        wr = np.broadcast_to(np.asarray(wr_id, np.uint64), (n,))
        raddr = 0x7F00_0000_0000 + r.qpn * 0x10000
        rkey = r.qpn * 16 + 2
        st = p.stream(q.tid)
        tt = p.thread_totals[q.tid]
        if p.mode == "full":
            st.add(t, records(n, type=fmt.RecType.SEND_WR, qpn=q.qpn, op=op, aux=1, len=size, addr=raddr, key=rkey,
                              extra=wr, flags=flags))
            wc = {WR_SEND: WC_SEND, WR_SEND_IMM: WC_SEND, WR_RDMA_WRITE: WC_RDMA_WRITE,
                  WR_RDMA_WRITE_IMM: WC_RDMA_WRITE, WR_RDMA_READ: WC_RDMA_READ}[op]
            ts = t[sig] + 1800
            st.add(ts, records(len(ts), type=fmt.RecType.COMPLETION, qpn=q.qpn, op=wc, aux=0, len=0,
                               extra=wr[sig], aux32=0))
            tt["completions"] += len(ts)
            p.count_records(q.tid, n + len(ts))
            self.expected.send_completions[(p.pid, q.qpn)] += len(ts)
            self.expected.flows_local += len(ts)
        elif p.mode == "simple":
            st.add(t, records(n, type=fmt.RecType.POST_SEND, qpn=q.qpn, op=op, aux32=1, len=size, addr=raddr,
                              key=rkey, extra=wr, flags=flags))
            p.count_records(q.tid, n)
        tt["calls"][lv.Call.POST_SEND] += n
        tt["ops"][op] += n
        tt["bytes"][op] += n * size
        agg = tt["qps"].setdefault(q.qpn, [r.qpn, 0, 0])
        agg[1] += n
        agg[2] += n * size
        e = self.expected
        e.sends[(p.pid, q.qpn)] += n
        if self.keep_times:
            e.send_times[(p.pid, q.qpn)].extend(int(x) for x in t)
        src, dst = (r.proc.pid, p.pid) if op == WR_RDMA_READ else (p.pid, r.proc.pid)
        e.bytes[(src, dst)] += n * size
        e.ops[(src, dst)] += n

    def _recv_side(self, q: Qp, t_recv: np.ndarray, size: int) -> None:
        """Receive completions on q at t_recv, each followed by a repost (full mode)."""
        p = q.proc
        n = len(t_recv)
        if p.mode != "full":
            return
        st = p.stream(q.tid)
        st.add(t_recv, records(n, type=fmt.RecType.COMPLETION, qpn=q.qpn, op=WC_RECV, aux=0, len=size,
                               extra=PINGPONG_RECV_WRID, aux32=q.peer.qpn))
        st.add(t_recv + 50, records(n, type=fmt.RecType.RECV_WR, qpn=q.qpn, aux=1, len=size,
                                    addr=0x7F00_0000_0000 + q.qpn * 0x10000, key=q.qpn * 16 + 1, extra=PINGPONG_RECV_WRID))
        p.thread_totals[q.tid]["completions"] += n
        p.count_records(q.tid, n)
        self._count_recv(q, n, size)
        self.expected.recv_completions[(p.pid, q.qpn)] += n
        self.expected.flows_send_recv += n

    # ---- output -------------------------------------------------------------------------------

    def flush(self, root: str | os.PathLike | None = None, layout: str | None = None) -> None:
        """Write the records generated so far and free them (the trace stays open)."""
        if root is not None:
            self._root, self._layout = Path(root), layout or self._layout
        assert self._root is not None, "flush(root) first"
        for p in self.procs:
            d = self._proc_dir(p)
            for s in p.streams.values():
                s.flush(d / "streams")

    def write(self, root: str | os.PathLike | None = None, layout: str = "host") -> list[Path]:
        """Finish every process (end calibration, live block, cold events, metadata) and return
        the trace directories: one per host (`layout="host"`), per process ("process") or one
        for all ("single")."""
        if root is not None:
            self._root, self._layout = Path(root), layout
        for p in self.procs:
            p.calibrate(p.end_ns + 5000, record=True)
        self.flush()
        dirs: dict[Path, list[SynthProcess]] = defaultdict(list)
        for p in self.procs:
            dirs[self._trace_dir(p)].append(p)
            self._finish(p)
        for d, procs in dirs.items():
            write_json(d / "session.json", {
                "format": "sigmatrace-trace", "version": 1, "sigmatrace_version": __version__,
                "command": "spawn", "target": ["synthetic"], "mode": procs[0].mode, "providers": ["verbs", "mlx5"],
                "doorbells": procs[0].doorbells, "host": procs[0].host,
                "started_ns": int(procs[0].clock.real([min(q.start_ns for q in procs)])[0]),
                "ended_ns": int(procs[0].clock.real([max(q.end_ns for q in procs) + 10_000])[0]),
                "status": "completed", "processes": [q.pid for q in procs]})
        return sorted(dirs)

    def _trace_dir(self, p: SynthProcess) -> Path:
        if self._layout == "single":
            return make_dir(self._root)
        if self._layout == "process":
            return make_dir(self._root / f"{p.host}-{p.pid}")
        return make_dir(self._root / p.host)

    def _proc_dir(self, p: SynthProcess) -> Path:
        if p.dir is None:
            p.dir = make_dir(self._trace_dir(p) / f"p{p.pid}")
        return p.dir

    def _finish(self, p: SynthProcess) -> None:
        d = self._proc_dir(p)
        write_json(d / "meta.json", {"pid": p.pid, "ppid": 1, "exe": "/usr/bin/synthetic", "argv": ["synthetic", str(p.pid)],
                                     "host": p.host, "started_ns": int(p.clock.real([p.start_ns])[0]), "env": p.env,
                                     "attached": False, "libraries": []})
        cold = sorted(p.cold, key=lambda e: e[0])
        fd = os.open(d / "cold.jsonl", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "w") as f:
            for t, tid, ev in cold:
                f.write(json.dumps({"ts": int(p.clock.tsc([t])[0]), "tid": tid, **ev}) + "\n")
        self._write_live(p, d / "live.bin", len(cold))
        for s in p.streams.values():
            if s.writer is not None:
                s.writer.close()
                s.writer = None

    def _write_live(self, p: SynthProcess, path: Path, n_cold: int) -> None:
        mm = create_live(path, p.pid, {"aggregate": lv.Mode.AGGREGATE, "simple": lv.Mode.SIMPLE,
                                       "full": lv.Mode.FULL}[p.mode])
        h = mm[:lv.HEADER_DTYPE.itemsize].view(lv.HEADER_DTYPE)
        first, last = p.calib[0], p.calib[-1]
        h["state"] = lv.State.EXITED
        h["doorbell_mode"] = {"off": lv.DoorbellMode.OFF, "forward": lv.DoorbellMode.FORWARD, "wqe": lv.DoorbellMode.WQE}[p.doorbells]
        h["coverage"] = int(lv.Coverage.REQUESTED | lv.Coverage.AGENT_LOADED | lv.Coverage.RUNTIME_READY |
                            lv.Coverage.HOOKS_INSTALLED | lv.Coverage.RECORDS_FLOWING)
        h["start_tsc"], h["start_mono_ns"], h["start_real_ns"] = first[1], first[2], first[3]
        h["end_tsc"], h["end_mono_ns"], h["end_real_ns"] = last[1], last[2], last[3]
        h["tsc_hz"] = p.clock.hz_estimate or round(p.clock.tsc_hz / 1e8) * 1e8
        h["records_written"] = sum(s.written for s in p.streams.values())
        h["records_dropped"] = p.records_dropped
        h["cold_events"] = n_cold
        threads = lv._table(mm, lv.THREAD_OFFSET, lv.THREAD_SIZE, lv.MAX_THREADS, lv.THREAD_DTYPE)
        tids = sorted(set(p.thread_totals) | {s.tid for s in p.streams.values()})
        for i, tid in enumerate(tids):
            tt = p.thread_totals[tid]
            threads["tid"][i], threads["in_use"][i] = tid, 1
            threads["name"][i] = p.threads.get(tid, f"t{tid}").encode()[:16]
            threads["records"][i] = tt["records"]
            threads["calls"][i] = tt["calls"]
            threads["ops"][i], threads["bytes"][i] = tt["ops"], tt["bytes"]
            threads["recv_wrs"][i], threads["recv_bytes"][i] = tt["recv_wrs"], tt["recv_bytes"]
            threads["completions"][i] = tt["completions"]
            threads["layer_retries"][i] = tt["layer_retries"]
            for j, (qpn, (rq, ops, nb)) in enumerate(sorted(tt["qps"].items())[:lv.THREAD_QPS]):
                threads["qps"][i, j] = (qpn, rq, ops, nb)
        h["n_threads"] = len(tids)
        qps = lv._table(mm, lv.QP_OFFSET, lv.QP_SIZE, lv.MAX_QPS, lv.QP_DTYPE)
        for i, (qpn, t) in enumerate(sorted(p.qp_totals.items())):
            qps["qpn"][i] = qpn
            qps["flags"][i] = int(t.get("flags", lv.QpFlag.DEVX | lv.QpFlag.GPU_SQ | lv.QpFlag.WATCHED))
            qps["repeater"][i], qps["gpu"][i], qps["sq_slots"][i] = t["repeater"], t["gpu"], t["sq_slots"]
            qps["remote_qpn"][i], qps["doorbells"][i], qps["pi"][i] = t["remote_qpn"], t["doorbells"], t["pi"]
            qps["wqe_pi"][i], qps["wqes"][i], qps["wqe_losses"][i] = t["pi"], t["wqes"], t["losses"]
            qps["wqe_bytes"][i], qps["wqe_ops"][i], qps["wqe_op_bytes"][i] = t["bytes"], t["ops"], t["op_bytes"]
        h["n_qps"] = len(p.qp_totals)
        reps = lv._table(mm, lv.REPEATER_OFFSET, lv.REPEATER_SIZE, lv.MAX_REPEATERS, lv.REPEATER_DTYPE)
        for i, (rep, r) in enumerate(sorted(p.repeaters.items())):
            reps["uar_reg_addr"][i], reps["state"][i] = r["uar"], lv.RepeaterState.STOPPED
            reps["doorbells"][i] = reps["forwarded"][i] = r["doorbells"]
        h["n_repeaters"] = len(p.repeaters)
        mm.flush()
        del mm
