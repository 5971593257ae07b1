"""Parquet tables of a trace, for SQL (sigmatrace sql), any dataframe tool and cluster engines.

The big tables, ops and doorbells, are partitioned the Hive way, one file per process:
DIR/ops/node=<host>/rank=<rank>/part-p<pid>.parquet (Spark, Trino, DuckDB, Polars and Arrow
datasets read the directory as one table with `node` and `rank` columns).  They are written a row
group at a time as the records stream by, one process after the other, so one file per table is
open at a time whatever the number of ranks.  The small tables are one file each, written at the
end: DIR/calls.parquet, qps.parquet, mrs.parquet, processes.parquet, problems.parquet.
docs/export.md gives every column.  Timestamps are
CLOCK_REALTIME ns (int64), like every export.  What belongs to a QP (its GPU, its peer) is in
qps only, once, rather than in every row: `sigmatrace sql` joins it into its ops and doorbells
views (host, pid, qpn), so the big tables stay narrow and fast to write.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..correlate.calls import function_pairs
from ..correlate.events import Batch
from ..correlate.model import RunModel
from ..correlate.output import Output
from ..correlate.traceset import Proc
from ..decode import names as N
from ..trace import format as fmt
from ..trace import layers as ly
from ..trace.reader import Problem
from .outfile import OutputError, open_output, output_dir, output_error, write_json_output

RT = fmt.RecType
MARKER = "sigmatrace-tables.json"      # written last: the tables are complete
TABLES = ("ops", "doorbells", "calls", "qps", "mrs", "processes", "problems")
PARTITIONED = ("ops", "doorbells")     # DIR/<table>/node=<host>/rank=<rank>/part-<process>.parquet
LAYOUT = "hive-node-rank"              # in the marker: what DIR holds
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"   # Hive's name for a null value (a process without a rank)
_PART_FILE = re.compile(r"part-[A-Za-z0-9._-]+\.parquet")

KINDS = ["post_send", "send_wr", "recv_wr", "srq_recv_wr", "completion", "wqe", "wqe_loss", "cxi_cmd", "call"]
KIND_CALL = 8
_KIND_OF_TYPE = np.full(256, -1, np.int8)
for _t, _k in ((RT.POST_SEND, 0), (RT.SEND_WR, 1), (RT.RECV_WR, 2), (RT.POST_SRQ_RECV, 3), (RT.COMPLETION, 4),
               (RT.WQE, 5), (RT.WQE_LOSS, 6), (RT.CXI_CMD, 7)):
    _KIND_OF_TYPE[_t] = _k
# the `layer` column: each kind's layer; calls: their own (ucx for UCP and UCT)
LAYER_NAMES = ["verbs", "mlx5", "cxi", "ucx", "libfabric", "unknown"]
_LAYER_OF_KIND = np.array([0, 0, 0, 0, 0, 1, 1, 2], np.int8)
_LAYER_OF_CALL = np.full(256, 5, np.int8)
_LAYER_OF_CALL[[ly.Layer.UCP, ly.Layer.UCT]] = 3
_LAYER_OF_CALL[ly.Layer.LIBFABRIC] = 4
# operation names: a block of 256 per code table; each kind reads its own block
_OP_TABLES = [N.IBV_WR, N.IBV_WC_OPCODE, N.MLX5_OPCODE, N.CXI_DMA_OPCODE]
OP_NAMES = [N.name(t, c) for t in _OP_TABLES for c in range(256)] + ["RECV", "WQE_LOSS"]
OP_CALL_BASE = len(OP_NAMES)       # calls: their function names follow (ParquetOutput.begin)
_OP_BLOCK_OF_KIND = np.array([0, 0, -1, -1, 256, 512, -2, 768], np.int64)
OP_RECV, OP_LOSS = 1024, 1025
STATUS_NAMES = [N.name(N.IBV_WC_STATUS, c) for c in range(256)]
# (type, opcode) -> index into OP_NAMES, in one gather
_OP_INDEX = np.full(256 * 256, OP_LOSS, np.int16)
for _t in range(256):
    _k = _KIND_OF_TYPE[_t]
    if _k < 0:
        continue
    _b = _OP_BLOCK_OF_KIND[_k]
    _OP_INDEX[_t * 256:(_t + 1) * 256] = (_b + np.arange(256)) if _b >= 0 else (OP_RECV if _b == -1 else OP_LOSS)


def _types(*types) -> np.ndarray:
    m = np.zeros(256, bool)
    m[list(types)] = True
    return m


# which record types give which ops column (the others write 0)
_HAS_WRID = _types(RT.POST_SEND, RT.SEND_WR, RT.RECV_WR, RT.POST_SRQ_RECV, RT.COMPLETION)
_HAS_REMOTE = _types(RT.POST_SEND, RT.SEND_WR, RT.WQE, RT.CXI_CMD)
_HAS_RKEY = _types(RT.POST_SEND, RT.SEND_WR, RT.WQE)
_LOCAL_FROM_ADDR = _types(RT.RECV_WR, RT.POST_SRQ_RECV)
_SGE_FROM_AUX = _types(RT.SEND_WR, RT.RECV_WR, RT.POST_SRQ_RECV)

OPS_SCHEMA = pa.schema([
    ("host", pa.dictionary(pa.int32(), pa.string())), ("pid", pa.int32()), ("tid", pa.int32()),
    ("ts_ns", pa.int64()), ("kind", pa.dictionary(pa.int8(), pa.string())),
    ("op", pa.dictionary(pa.int16(), pa.string())), ("qpn", pa.uint32()),
    ("bytes", pa.uint32()), ("wrs", pa.uint32()), ("flags", pa.uint8()),
    ("status", pa.dictionary(pa.int16(), pa.string())), ("wr_id", pa.uint64()),
    ("remote_addr", pa.uint64()), ("rkey", pa.uint32()), ("local_addr", pa.uint64()), ("lkey", pa.uint32()),
    ("imm", pa.uint32()), ("src_qp", pa.uint32()), ("sge", pa.uint16()),
    ("doorbell_ns", pa.int64()), ("wqe_index", pa.uint32()),
    ("layer", pa.dictionary(pa.int8(), pa.string())), ("call_id", pa.int64()), ("parent_call_id", pa.int64()),
    ("end_ns", pa.int64()), ("ret", pa.int32()), ("tries", pa.uint32()),
])

DOORBELLS_SCHEMA = pa.schema([
    ("host", pa.dictionary(pa.int32(), pa.string())), ("pid", pa.int32()), ("tid", pa.int32()),
    ("ts_ns", pa.int64()), ("qpn", pa.uint32()), ("pi", pa.uint32()), ("bbs", pa.uint32()),
    ("wqes", pa.int64()), ("bytes", pa.int64()), ("op", pa.dictionary(pa.int16(), pa.string())),
    ("remote_addr", pa.uint64()), ("rkey", pa.uint32()), ("lost_bbs", pa.int64()), ("repeater", pa.uint32()),
    ("raw", pa.uint64()),
])

# Dictionary encoding for the string columns (their values repeat); plain for numbers, which is
# cheapest to write.  Statistics on the timestamp, so queries on a time range skip row groups.
_DICT_COLUMNS = ["host", "kind", "op", "status", "layer"]
_STATS_COLUMNS = ["ts_ns"]
# Wide numbers that vary row to row write fastest (and compress best) split by byte
# (BYTE_STREAM_SPLIT; readers: Arrow >= 16, DuckDB >= 1.1)
_SPLIT_COLUMNS = ["ts_ns", "bytes", "remote_addr", "local_addr", "doorbell_ns", "raw"]


class ParquetOutput(Output):
    name = "parquet"
    needs_endpoints = False        # QP properties live in qps, not in every row

    def __init__(self, directory: str | os.PathLike, compression: str = "snappy", row_group: int = 1 << 18,
                 key: str | None = None):
        self.dir = Path(directory)
        self.key = key
        self.compression = compression
        self.row_group = row_group
        self.rows = {t: 0 for t in TABLES}

    def begin(self, model: RunModel) -> None:
        self.model = model
        output_dir(self.dir)
        for t in PARTITIONED:
            _fresh_table_dir(self.dir / t)
        self.hosts = sorted({p.host for p in model.procs})
        self.host_dict = pa.array(self.hosts, pa.string())
        self.host_idx = {h: i for i, h in enumerate(self.hosts)}
        self.kind_dict = pa.array(KINDS, pa.string())
        # calls' function names: every known one, and any other a trace's calls hold
        pairs = function_pairs(model.calls.values())
        self.call_op = {pair: OP_CALL_BASE + i for i, pair in enumerate(pairs)}
        self.op_dict = pa.array(OP_NAMES + [ly.function_name(*pair) for pair in pairs], pa.string())
        self.layer_dict = pa.array(LAYER_NAMES, pa.string())
        self.status_dict = pa.array(STATUS_NAMES, pa.string())
        self.part_names = _part_names(model.procs)
        self.partitions: dict[str, dict[str, int]] = {t: {} for t in PARTITIONED}   # file -> rows
        self.current: dict[str, tuple[Proc, pq.ParquetWriter, object] | None] = {t: None for t in PARTITIONED}
        self.pending: dict[str, list[pa.RecordBatch]] = {"ops": [], "doorbells": []}
        self.pending_rows = {"ops": 0, "doorbells": 0}

    # ---- streamed tables -----------------------------------------------------------------------

    def _open(self, table: str, schema: pa.Schema, p: Proc) -> tuple[Proc, pq.ParquetWriter, object]:
        rel = self.part_names[p.index]
        path = self.dir / table / rel
        d = output_dir(self.dir / table)
        for part in rel.split("/")[:-1]:       # node=..., rank=...: made by us, owner-only
            d = output_dir(d / part)
        f = open_output(path)
        w = pq.ParquetWriter(f, schema, compression=self.compression,
                             use_dictionary=[c for c in _DICT_COLUMNS if c in schema.names],
                             column_encoding={c: "BYTE_STREAM_SPLIT" for c in _SPLIT_COLUMNS if c in schema.names},
                             write_statistics=_STATS_COLUMNS, data_page_version="2.0")
        self.partitions[table][rel] = 0
        return (p, w, f)

    def _close(self, table: str, schema: pa.Schema) -> None:
        """Finish the table's file of the current process."""
        self._flush(table, schema)
        cur = self.current[table]
        if cur is not None:
            cur[1].close()
            cur[2].close()
            self.current[table] = None

    def _append(self, table: str, schema: pa.Schema, rb: pa.RecordBatch, p: Proc) -> None:
        cur = self.current[table]
        if cur is None or cur[0] is not p:       # the stream has moved on to the next process
            self._close(table, schema)
            self.current[table] = self._open(table, schema, p)
        self.pending[table].append(rb)
        self.pending_rows[table] += rb.num_rows
        if self.pending_rows[table] >= self.row_group:
            self._flush(table, schema)

    def _flush(self, table: str, schema: pa.Schema) -> None:
        if not self.pending[table]:
            return
        t = pa.Table.from_batches(self.pending[table], schema)
        p, w, _ = self.current[table]
        w.write_table(t, row_group_size=max(t.num_rows, 1))
        self.rows[table] += t.num_rows
        self.partitions[table][self.part_names[p.index]] += t.num_rows
        self.pending[table] = []
        self.pending_rows[table] = 0

    def calls(self, p: Proc, b: Batch) -> None:
        """One ops row per call (kind `call`): its begin, end, return value, parent."""
        n = b.n
        op = np.array([self.call_op[(la, fn)] for la, fn in zip(b["layer"].tolist(), b["op"].tolist())], np.int16)
        flags = np.where(b["err"], fmt.RecFlag.ERR, 0) | np.where(b["parent"] != 0, fmt.RecFlag.NESTED, 0)
        zero32, zero64 = np.zeros(n, np.uint32), np.zeros(n, np.uint64)
        cols = {
            "host": _dict(pa.array(np.full(n, self.host_idx[p.host], np.int32)), self.host_dict),
            "pid": pa.array(np.full(n, p.pid, np.int32)), "tid": pa.array(b["tid"].astype(np.int32)),
            "ts_ns": pa.array(b["ns"]), "kind": _dict(pa.array(np.full(n, KIND_CALL, np.int8)), self.kind_dict),
            "op": _dict(pa.array(op), self.op_dict), "qpn": pa.array(b["qpn"]), "bytes": pa.array(b["len"]),
            "wrs": pa.array(np.ones(n, np.uint32)), "flags": pa.array(flags.astype(np.uint8)),
            "status": _dict(pa.array(np.zeros(n, np.int16), mask=np.ones(n, bool)), self.status_dict),
            "wr_id": pa.array(zero64), "remote_addr": pa.array(b["addr"]), "rkey": pa.array(b["key"]),
            "local_addr": pa.array(zero64), "lkey": pa.array(zero32), "imm": pa.array(zero32),
            "src_qp": pa.array(zero32), "sge": pa.array(np.zeros(n, np.uint16)),
            "doorbell_ns": pa.nulls(n, pa.int64()), "wqe_index": pa.array(zero32),
            "layer": _dict(pa.array(_LAYER_OF_CALL[b["layer"]]), self.layer_dict),
            "call_id": pa.array(b["id"]),
            "parent_call_id": pa.array(b["parent"], mask=b["parent"] == 0),
            "end_ns": pa.array(b["end_ns"], mask=~b["closed"]),
            "ret": pa.array(b["ret"], mask=~b["closed"]),
            "tries": pa.array(b["tries"], mask=~b["closed"]),
        }
        self._append("ops", OPS_SCHEMA, pa.RecordBatch.from_arrays([cols[f.name] for f in OPS_SCHEMA], schema=OPS_SCHEMA), p)

    def host(self, p: Proc, b: Batch) -> None:
        self._ops(p, b, b["ns"], None)

    def wqes(self, p: Proc, b: Batch) -> None:
        has_db = b["db_ns"] >= 0
        self._ops(p, b, np.where(has_db, b["db_ns"], b["ns"]), has_db)

    def _ops(self, p: Proc, b: Batch, ts: np.ndarray, has_db) -> None:
        n = b.n
        t = b["type"]
        kind = _KIND_OF_TYPE[t]
        present = np.bincount(kind, minlength=len(KINDS))
        op = _OP_INDEX[t.astype(np.intp) * 256 + b["op"]]
        addr, key, extra, aux32 = b["addr"], b["key"], b["extra"], b["aux32"]
        zero64 = np.uint64(0)
        comp = kind == 4
        local_addr = np.where(_LOCAL_FROM_ADDR[t], addr, zero64)
        lkey = np.where(_LOCAL_FROM_ADDR[t], key, np.uint32(0))
        sge = np.where(_SGE_FROM_AUX[t], b["aux"], np.uint8(0)).astype(np.uint16)
        if present[5]:                                   # WQEs: their first data segment
            w = kind == 5
            local_addr[w] = b["seg_addr"][w]
            lkey[w] = b["seg_key"][w]
            sge[w] = b["nseg"][w]
        if present[7]:                                   # CXI commands: the local address
            x = kind == 7
            local_addr[x] = extra[x]
        cols = {
            "host": _dict(pa.array(np.full(n, self.host_idx[p.host], np.int32)), self.host_dict),
            "pid": pa.array(np.full(n, p.pid, np.int32)),
            "tid": pa.array(b["tid"]),
            "ts_ns": pa.array(ts),
            "kind": _dict(pa.array(kind), self.kind_dict),
            "op": _dict(pa.array(op), self.op_dict),
            "qpn": pa.array(b["qpn"]),
            "bytes": pa.array(b["len"]),
            "wrs": pa.array(np.where(t == RT.POST_SEND, np.maximum(aux32, np.uint32(1)), np.uint32(1))
                            if present[0] else np.ones(n, np.uint32)),
            "flags": pa.array(b["flags"]),
            "status": _dict(pa.array(b["aux"].astype(np.int16), mask=~comp), self.status_dict),
            "wr_id": pa.array(np.where(_HAS_WRID[t], extra, zero64)),
            "remote_addr": pa.array(np.where(_HAS_REMOTE[t], addr, zero64)),
            "rkey": pa.array(np.where(_HAS_RKEY[t], key, np.uint32(0))),
            "local_addr": pa.array(local_addr),
            "lkey": pa.array(lkey),
            "imm": pa.array(_imm(b, t, comp, kind == 5) if present[1] or present[4] or present[5] else np.zeros(n, np.uint32)),
            "src_qp": pa.array(np.where(comp, aux32, np.uint32(0))),
            "sge": pa.array(sge),
        }
        if has_db is None:
            cols["doorbell_ns"] = pa.nulls(n, pa.int64())
            cols["wqe_index"] = pa.array(np.zeros(n, np.uint32))
        else:
            cols["doorbell_ns"] = pa.array(b["db_ns"], mask=~has_db)
            cols["wqe_index"] = pa.array(aux32)
        cols["layer"] = _dict(pa.array(_LAYER_OF_KIND[kind]), self.layer_dict)
        call = b["call"].astype(np.int64) if b.has("call") else np.zeros(n, np.int64)
        cols["call_id"] = pa.array(call, mask=call == 0)
        cols["parent_call_id"] = pa.nulls(n, pa.int64())
        cols["end_ns"] = pa.nulls(n, pa.int64())
        cols["ret"] = pa.nulls(n, pa.int32())
        cols["tries"] = pa.nulls(n, pa.uint32())
        self._append("ops", OPS_SCHEMA, pa.RecordBatch.from_arrays([cols[f.name] for f in OPS_SCHEMA], schema=OPS_SCHEMA), p)

    def doorbells(self, p: Proc, b: Batch) -> None:
        n = b.n
        has_op = b["first_op"] >= 0
        cols = {
            "host": _dict(pa.array(np.full(n, self.host_idx[p.host], np.int32)), self.host_dict),
            "pid": pa.array(np.full(n, p.pid, np.int32)),
            "tid": pa.array(b["tid"].astype(np.int32)),
            "ts_ns": pa.array(b["ns"]),
            "qpn": pa.array(b["qpn"]),
            "pi": pa.array(b["aux32"]),
            "bbs": pa.array(b["len"]),
            "wqes": pa.array(b["n_wqes"]),
            "bytes": pa.array(b["wqe_bytes"]),
            "op": _dict(pa.array((512 + np.maximum(b["first_op"], 0)).astype(np.int16),
                                                          mask=~has_op), self.op_dict),
            "remote_addr": pa.array(b["first_raddr"]),
            "rkey": pa.array(b["first_rkey"].astype(np.uint32)),
            "lost_bbs": pa.array(b["lost_bbs"]),
            "repeater": pa.array(b["key"]),
            "raw": pa.array(b["extra"]),
        }
        self._append("doorbells", DOORBELLS_SCHEMA,
                     pa.RecordBatch.from_arrays([cols[f.name] for f in DOORBELLS_SCHEMA], schema=DOORBELLS_SCHEMA), p)

    # ---- small tables --------------------------------------------------------------------------

    def finish(self, problems: list[Problem]) -> dict:
        for name, schema in (("ops", OPS_SCHEMA), ("doorbells", DOORBELLS_SCHEMA)):
            self._close(name, schema)
            # every process has its partition, empty where it has no rows: a reader of the
            # directory finds the schema even when no process has any
            for p in self.model.procs:
                if self.part_names[p.index] not in self.partitions[name]:
                    self.current[name] = self._open(name, schema, p)
                    self._close(name, schema)
        self._small("calls", self._calls())
        self._small("qps", self._qps())
        self._small("mrs", self._mrs())
        self._small("processes", self._processes())
        self._small("problems", pa.table({"path": pa.array([str(pr.path) for pr in problems], pa.string()),
                                          "offset": pa.array([pr.offset for pr in problems], pa.int64()),
                                          "what": pa.array([pr.what for pr in problems], pa.string())}))
        traces = [str(td.path.resolve()) for td in self.model.traces.dirs]
        marker = {"key": self.key or fingerprint(traces, [self.dir]), "traces": traces,
                  "sigmatrace_version": __version__, "rows": dict(self.rows), "layout": LAYOUT,
                  "partitions": self.partitions}
        write_json_output(self.dir / MARKER, marker, indent=2, sort_keys=True)
        return {"format": "parquet", "path": str(self.dir), "rows": dict(self.rows)}

    def describe(self, summary: dict) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in summary["rows"].items())

    def _small(self, name: str, table: pa.Table) -> None:
        with open_output(self.dir / f"{name}.parquet") as f:
            pq.write_table(table, f, compression=self.compression)
        self.rows[name] = table.num_rows

    def _calls(self) -> pa.Table:
        rows = {k: [] for k in ("host", "pid", "tid", "ts_ns", "fn", "ev", "ret", "qpn", "args")}
        for p in self.model.procs:
            ns = self.model.traces.cold_ns(p)
            for e, t in zip(p.cold, ns.tolist()):
                if not e.get("fn"):
                    continue
                rows["host"].append(p.host)
                rows["pid"].append(p.pid)
                rows["tid"].append(_int_or_none(e.get("tid")))
                rows["ts_ns"].append(int(t))
                rows["fn"].append(str(e["fn"]))
                rows["ev"].append(str(e.get("ev")))
                ret = _int_or_none(e.get("ret"))
                rows["ret"].append(ret if ret is None or -2**63 <= ret < 2**63 else ret - 2**64)
                rows["qpn"].append(_int_or_none(e.get("qpn")))
                rows["args"].append(json.dumps({k: v for k, v in e.items() if k not in ("ts", "tid", "ev", "fn", "ret")},
                                               sort_keys=True))
        return pa.table({"host": pa.array(rows["host"], pa.string()), "pid": pa.array(rows["pid"], pa.int32()),
                         "tid": pa.array(rows["tid"], pa.int32()), "ts_ns": pa.array(rows["ts_ns"], pa.int64()),
                         "fn": pa.array(rows["fn"], pa.string()), "ev": pa.array(rows["ev"], pa.string()),
                         "ret": pa.array(rows["ret"], pa.int64()), "qpn": pa.array(rows["qpn"], pa.uint32()),
                         "args": pa.array(rows["args"], pa.string())})

    def _qps(self) -> pa.Table:
        topo = self.model.topology
        procs = self.model.procs
        rows = []
        for q in topo.qps:
            p = procs[q.proc]
            r = topo.qps[q.peer] if q.peer >= 0 else None
            rows.append({
                "host": p.host, "pid": p.pid, "qpn": q.qpn, "type": q.type, "origin": q.origin,
                "gpu": q.gpu, "created_ns": q.created_ns, "destroyed_ns": q.destroyed_ns, "state": q.state,
                "port": q.port, "lid": q.lid, "gid": q.gid, "dest_qpn": q.dest_qpn, "dlid": q.dlid, "dgid": q.dgid,
                "sq_slots": q.sq_slots,
                "peer_host": procs[r.proc].host if r else None, "peer_pid": procs[r.proc].pid if r else None,
                "peer_qpn": r.qpn if r else None})
        schema = pa.schema([("host", pa.string()), ("pid", pa.int32()), ("qpn", pa.uint32()), ("type", pa.string()),
                            ("origin", pa.string()), ("gpu", pa.int16()), ("created_ns", pa.int64()),
                            ("destroyed_ns", pa.int64()), ("state", pa.string()), ("port", pa.int32()),
                            ("lid", pa.int32()), ("gid", pa.string()), ("dest_qpn", pa.uint32()), ("dlid", pa.int32()),
                            ("dgid", pa.string()), ("sq_slots", pa.int32()), ("peer_host", pa.string()),
                            ("peer_pid", pa.int32()), ("peer_qpn", pa.uint32())])
        return pa.Table.from_pylist(rows, schema)

    def _mrs(self) -> pa.Table:
        rows = []
        for p in self.model.procs:
            ns = self.model.traces.cold_ns(p)
            live: dict[int, dict] = {}
            for e, t in zip(p.cold, ns.tolist()):
                if e.get("ev") == "mr_reg":
                    row = {"host": p.host, "pid": p.pid, "reg_ns": int(t), "dereg_ns": None}
                    for k in ("pd", "mr", "addr", "len", "iova", "access", "lkey", "rkey"):
                        row[k] = _int_or_none(e.get(k))
                    rows.append(row)
                    if row["mr"] is not None:
                        live[row["mr"]] = row
                elif e.get("ev") == "mr_dereg":
                    row = live.pop(_int_or_none(e.get("mr")), None)
                    if row is not None:
                        row["dereg_ns"] = int(t)
        schema = pa.schema([("host", pa.string()), ("pid", pa.int32()), ("reg_ns", pa.int64()), ("dereg_ns", pa.int64()),
                            ("pd", pa.uint64()), ("mr", pa.uint64()), ("addr", pa.uint64()), ("len", pa.uint64()),
                            ("iova", pa.uint64()), ("access", pa.uint32()), ("lkey", pa.uint32()), ("rkey", pa.uint32())])
        return pa.Table.from_pylist(rows, schema)

    def _processes(self) -> pa.Table:
        rows = []
        for p in self.model.procs:
            h = p.live.header if p.live is not None else None
            rows.append({
                "host": p.host, "pid": p.pid, "rank": p.rank, "trace": str(p.trace.path),
                "exe": str(p.pt.meta.get("exe") or ""), "argv": " ".join(map(str, p.argv)), "mode": p.mode,
                "doorbell_mode": p.doorbell_mode, "tsc_hz": p.clock.tsc_hz, "drift_ppm": p.clock.drift_ppm,
                "calib_points": p.clock.points, "calib_residual_ns": p.clock.residual_ns(),
                "start_ns": int(p.clock.real[0]), "end_ns": int(p.clock.real[-1]),
                "streams": len(p.streams), "records": p.n_records,
                "records_written": int(h["records_written"]) if h is not None else None,
                "records_dropped": int(h["records_dropped"]) if h is not None else None,
                "cold_events": len(p.cold)})
        schema = pa.schema([("host", pa.string()), ("pid", pa.int32()), ("rank", pa.int32()), ("trace", pa.string()),
                            ("exe", pa.string()), ("argv", pa.string()), ("mode", pa.string()),
                            ("doorbell_mode", pa.string()), ("tsc_hz", pa.float64()), ("drift_ppm", pa.float64()),
                            ("calib_points", pa.int32()), ("calib_residual_ns", pa.float64()), ("start_ns", pa.int64()),
                            ("end_ns", pa.int64()), ("streams", pa.int32()), ("records", pa.int64()),
                            ("records_written", pa.int64()), ("records_dropped", pa.int64()), ("cold_events", pa.int64())])
        return pa.Table.from_pylist(rows, schema)


def fingerprint(paths: list[str | os.PathLike], exclude: list[str | os.PathLike] = ()) -> str:
    """A key that changes when any file of any trace changes."""
    skip = {os.path.realpath(e) for e in exclude}
    h = hashlib.sha256(__version__.encode())
    for root in sorted(Path(p).resolve() for p in paths):     # the same traces in any order
        h.update(str(root).encode())
        for dirpath, dirnames, filenames in os.walk(root):         # top-down: dirnames pruned, sorted
            # tables written inside a trace are not part of it
            dirnames[:] = sorted(d for d in dirnames if not d.endswith(".building") and
                                 not os.path.exists(os.path.join(dirpath, d, MARKER)) and
                                 os.path.realpath(os.path.join(dirpath, d)) not in skip)
            for f in sorted(filenames):
                st = os.stat(os.path.join(dirpath, f))
                h.update(f"{os.path.relpath(os.path.join(dirpath, f), root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:24]


def partition_path(host: str, rank: int | None) -> str:
    """node=<host>/rank=<rank>: the host escaped as Hive escapes partition values."""
    return f"node={quote(host, safe='-_.') or NULL_PARTITION}/rank={NULL_PARTITION if rank is None else rank}"


def _part_names(procs: list[Proc]) -> list[str]:
    """Each process's file under a partitioned table, by process index: part-p<pid>.parquet (the
    process directory's name, p<pid>.<n> for a later exec image), made unique where two traces
    hold the same name."""
    names, seen = [], set()
    for p in procs:
        base = f"{partition_path(p.host, p.rank)}/part-{p.pt.path.name}"
        name = f"{base}.parquet" if f"{base}.parquet" not in seen else f"{base}-{p.index}.parquet"
        seen.add(name)
        names.append(name)
    return names


def _fresh_table_dir(d: Path) -> None:
    """A partitioned table's directory, empty: one left by an earlier export is removed (only if
    it holds nothing but our partitions), never through a link."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return
    except OSError as e:
        raise output_error(d, e) from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(f"cannot write into {d}: it is a symbolic link (not followed)", hint="remove it first")
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"cannot write into {d}: it exists and is not a directory", hint="choose another directory")
    for node in os.scandir(d):
        ok = node.name.startswith("node=") and node.is_dir(follow_symlinks=False)
        for rank in os.scandir(node.path) if ok else ():
            ok = ok and rank.name.startswith("rank=") and rank.is_dir(follow_symlinks=False)
            for f in os.scandir(rank.path) if ok else ():
                ok = ok and bool(_PART_FILE.fullmatch(f.name)) and f.is_file(follow_symlinks=False)
        if not ok:
            raise OutputError(f"{d} holds files that are not sigmatrace tables ({node.name})",
                              hint="give a new or empty directory to --parquet")
    shutil.rmtree(d)


def _dict(indices: pa.Array, dictionary: pa.Array) -> pa.DictionaryArray:
    # indices are made in range here: skip the bounds check
    return pa.DictionaryArray.from_arrays(indices, dictionary, safe=False)


def _imm(b: Batch, t: np.ndarray, comp: np.ndarray, wqe: np.ndarray) -> np.ndarray:
    """Immediate data: a completion's imm_data, a SEND_WR's (with-immediate opcodes), a WQE's."""
    out = np.where(comp, b["key"], np.uint32(0))
    op = b["op"]
    wr = (t == RT.SEND_WR) & ((op == 1) | (op == 3))
    if wr.any():
        out[wr] = b["aux32"][wr]
    if wqe.any():
        out[wqe] = (b["extra"][wqe] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return out


def _int_or_none(v) -> int | None:
    if isinstance(v, bool) or v is None:
        return None if v is None else int(v)
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
