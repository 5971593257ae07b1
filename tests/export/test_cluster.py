"""A job of many ranks, one trace directory per rank: the partitioned Parquet layout (exact rows per
node/rank partition, read as it is by DuckDB's hive partitioning), peers found among QPs that every
rank numbers alike, and the commands within a small file-descriptor limit."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sigmatrace.correlate.model import RunModel
from sigmatrace.correlate.topology import _Candidates
from sigmatrace.trace import format as fmt
from sigmatrace.trace.reader import TraceDir
from sigmatrace.trace.synth_cluster import node_of, partner, pid_of, write_cluster

from .conftest import build_two_nodes

RANKS, PER_NODE = 16, 4
RT = fmt.RecType
OPS_TYPES = [RT.POST_SEND, RT.SEND_WR, RT.RECV_WR, RT.POST_SRQ_RECV, RT.COMPLETION, RT.WQE, RT.WQE_LOSS, RT.CXI_CMD]


def cli(*args, limit_files: int | None = None):
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit_files, limit_files))
    return subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "XDG_CACHE_HOME": str(Path(str(args[-1])).parent)},
                          preexec_fn=limit if limit_files else None)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return write_cluster(tmp_path_factory.mktemp("job") / "run", RANKS, 1500, ranks_per_node=PER_NODE)


def expected_rows(d: Path) -> tuple[int, int]:
    """(ops rows, doorbell rows) of a rank, counted from its stream files' record types."""
    [pt] = TraceDir(d).processes
    counts = np.zeros(256, np.int64)
    for s in pt.streams():
        counts += np.bincount(s.read()["type"], minlength=256)
    return int(counts[OPS_TYPES].sum()), int(counts[RT.DOORBELL])


def test_the_job(job):
    assert [d.name for d in job] == [f"rank-{r:04d}" for r in range(RANKS)]
    for r, d in enumerate(job):
        [pt] = TraceDir(d).processes
        assert (pt.host, pt.pid, pt.meta["env"]["RANK"]) == (node_of(r, PER_NODE), pid_of(r), str(r))
    assert [partner(r, PER_NODE) for r in range(8)] == [4, 5, 6, 7, 0, 1, 2, 3]


def test_partitions_hold_each_rank_exactly(job, tmp_path):
    out = tmp_path / "tables"
    r = cli("export", *job, "--parquet", out, "-q")
    assert r.returncode == 0, r.stderr
    want = {}
    for rank, d in enumerate(job):
        ops, dbs = expected_rows(d)
        assert ops > 500 and dbs > 50        # each partition has rows of its own
        want[(node_of(rank, PER_NODE), rank)] = (ops, dbs, f"node={node_of(rank, PER_NODE)}/rank={rank}/part-p{pid_of(rank)}.parquet")
    marker = json.loads((out / "sigmatrace-tables.json").read_text())
    for i, table in enumerate(("ops", "doorbells")):
        files = sorted(str(f.relative_to(out / table)) for f in (out / table).rglob("*") if f.is_file())
        assert files == sorted(w[2] for w in want.values())
        for w in want.values():
            assert pq.read_metadata(out / table / w[2]).num_rows == w[i]
        assert marker["partitions"][table] == {w[2]: w[i] for w in want.values()}
        assert marker["rows"][table] == sum(w[i] for w in want.values())
    assert marker["layout"] == "hive-node-rank"
    # a cluster engine reads the directory as it is: DuckDB with hive partitioning
    con = duckdb.connect()
    for i, table in enumerate(("ops", "doorbells")):
        got = con.sql(f"SELECT node, rank, count(*), count(DISTINCT host), min(host) FROM read_parquet("
                      f"'{out}/{table}/*/*/*.parquet', hive_partitioning = true) GROUP BY ALL ORDER BY rank").fetchall()
        assert got == [(node, rank, w[i], 1, node) for (node, rank), w in sorted(want.items(), key=lambda x: x[0][1])]
    # and so does `sigmatrace sql`, whose views carry node and rank
    q = cli("sql", "--parquet", out, "SELECT node, rank, count(*) AS n FROM ops WHERE peer_host IS NOT NULL "
                                     "GROUP BY ALL ORDER BY rank", "--format", "json")
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout) == [{"node": node, "rank": rank, "n": w[0]}
                                    for (node, rank), w in sorted(want.items(), key=lambda x: x[0][1])]


def test_a_new_export_replaces_every_partition(job, tmp_path):
    out = tmp_path / "tables"
    assert cli("export", *job, "--parquet", out, "-q").returncode == 0
    r = cli("export", *job[:8], "--parquet", out, "-q")
    assert r.returncode == 0, r.stderr
    ranks = sorted(int(p.name.split("=")[1]) for p in (out / "ops").glob("node=*/rank=*"))
    assert ranks == list(range(8))
    assert duckdb.connect().execute(f"SELECT count(DISTINCT rank) FROM read_parquet('{out}/ops/*/*/*.parquet', "
                                    "hive_partitioning = true)").fetchall() == [(8,)]


def test_a_process_without_rank_is_the_null_partition(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    meta = dirs[0] / "p4242" / "meta.json"       # node-a's process: no rank recorded anywhere
    m = json.loads(meta.read_text())
    m["env"] = {}
    meta.write_text(json.dumps(m))
    out = tmp_path / "tables"
    r = cli("export", *dirs, "--parquet", out, "-q")
    assert r.returncode == 0, r.stderr
    parts = sorted(str(p.relative_to(out / "ops")) for p in (out / "ops").rglob("*.parquet"))
    assert parts == ["node=node-a/rank=__HIVE_DEFAULT_PARTITION__/part-p4242.parquet",
                     "node=node-b/rank=1/part-p4242.parquet"]
    got = duckdb.connect().sql(f"SELECT node, rank, count(*) > 0 FROM read_parquet('{out}/ops/*/*/*.parquet', "
                     "hive_partitioning = true) GROUP BY ALL ORDER BY node").fetchall()
    assert got == [("node-a", None, True), ("node-b", 1, True)]


def test_every_rank_numbering_its_qps_alike(job):
    # every rank's QPs have the numbers of every other pair's: the peers come from the addresses
    model = RunModel.load(job)
    topo = model.topology
    assert len({q.qpn for q in topo.qps}) < RANKS and len(topo.qps) == 2 * RANKS
    for i, q in enumerate(topo.qps):
        me = model.procs[q.proc]
        peer = model.procs[topo.qps[q.peer].proc]
        assert peer.rank == partner(me.rank, PER_NODE), (me.rank, peer.rank)
        # only the QP at the address it was connected to is a candidate, not one per rank
        assert _Candidates(topo.qps).of(q) == [q.peer]
    assert not [p for p in model.problems if "matches" in p.what]


def test_export_and_sql_within_a_small_descriptor_limit(job, tmp_path):
    # 16 ranks x 2 streams, 2 partitioned tables x 16 partitions: a command that kept each rank's
    # files open would need more than the 40 descriptors allowed here
    out = tmp_path / "tables"
    r = cli("export", *job, "--parquet", out, "-q", limit_files=40)
    assert r.returncode == 0, r.stderr
    assert len(list((out / "ops").rglob("*.parquet"))) == RANKS
    r = cli("sql", "--parquet", out, "SELECT count(DISTINCT rank) AS n FROM ops", "--format", "json", limit_files=40)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"n": RANKS}]


def test_a_wide_matrix_is_listed_by_its_largest_cells(job, tmp_path):
    # 32 QPs: more columns than a table can show; the cells are listed, largest first, and the
    # JSON keeps the whole matrix
    r = cli("matrix", *job, "--by", "qp", "--json", tmp_path / "m.json")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "m.json").read_text())
    assert len(m["labels"]) == 2 * RANKS and len(m["cells"]) == 2 * RANKS
    lines = r.stdout.splitlines()
    assert lines[0].strip() == f"bytes (ops) by qp: the {2 * RANKS} largest of {2 * RANKS} cells among {2 * RANKS} qps"
    listed = [[c.strip() for c in line.split("│")] for line in lines if "│" in line]
    want = sorted(m["cells"], key=lambda c: (-c["bytes"], -c["ops"], c["src"], c["dst"]))
    assert [(src, dst, ops.split("(")[1].rstrip(")")) for src, dst, ops in listed] == \
        [(c["src"], c["dst"], f"{c['ops']:,}") for c in want]
    assert lines[-1] == f"total: {m['total_bytes']:,} bytes in {m['total_ops']:,} operations"
    # a matrix of 16 labels or fewer is still the table
    r = cli("matrix", *job, "--by", "process", "--json", tmp_path / "p.json")
    assert r.returncode == 0 and r.stdout.splitlines()[0].strip() == "bytes (ops) by process: rows send to columns"


def test_tables_of_the_single_file_layout_are_read_and_rebuilt(job, tmp_path):
    # tables as earlier versions wrote them: ops.parquet and doorbells.parquet, no layout in the marker
    out = tmp_path / "tables"
    assert cli("export", *job[:8], "--parquet", out, "-q").returncode == 0
    for t in ("ops", "doorbells"):
        parts = [pq.ParquetFile(f).read() for f in sorted((out / t).rglob("*.parquet"))]   # the files alone
        pq.write_table(pa.concat_tables(parts), out / f"{t}.parquet")
        for f in sorted((out / t).rglob("*"), reverse=True):
            f.unlink() if f.is_file() else f.rmdir()
        (out / t).rmdir()
    marker = json.loads((out / "sigmatrace-tables.json").read_text())
    del marker["layout"], marker["partitions"]
    (out / "sigmatrace-tables.json").write_text(json.dumps(marker))
    q = "SELECT pid, count(*) AS n FROM ops GROUP BY ALL ORDER BY pid"
    want = [{"pid": pid_of(r), "n": expected_rows(job[r])[0]} for r in range(8)]
    r = cli("sql", "--parquet", out, q, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == want
    # given the traces, the same directory is built anew in the partitioned layout
    r = cli("sql", *job[:8], q, "--parquet", out, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == want
    assert not (out / "ops.parquet").exists() and len(list((out / "ops").rglob("*.parquet"))) == 8
