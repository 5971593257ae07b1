"""`sigmatrace sql`: Parquet tables built on first use and cached, queried with DuckDB; counts
match the run exactly."""
import json
import os
import subprocess
import sys

import pytest

from .conftest import build_two_nodes


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ)
    e["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return e


def sql(env, *args, check=True):
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "sql", *map(str, args)], capture_output=True,
                       text=True, timeout=120, env=env)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def rows(env, *args):
    return json.loads(sql(env, *args, "--format", "json").stdout)


def _wqe_totals(t, opcode):
    """WQEs recovered of one mlx5 opcode and their bytes, as the generator counted them."""
    n = b = 0
    for p in t.procs:
        for tot in p.qp_totals.values():
            n += int(tot["ops"][opcode])
            b += int(tot["op_bytes"][opcode])
    return n, b


def test_counts_match_the_run(tmp_path, env):
    t, dirs = build_two_nodes(tmp_path / "run")
    e = t.expected
    got = {(r["kind"], r["op"]): (r["n"], r["b"]) for r in
           rows(env, *dirs, "SELECT kind, op, count(*) AS n, sum(bytes) AS b FROM ops GROUP BY ALL")}
    assert got == {
        ("send_wr", "SEND"): (100, 100 * 4096), ("send_wr", "RDMA_WRITE"): (12, 12 * 65536),
        ("recv_wr", "RECV"): (2 * 66, 2 * 66 * 4096),
        ("completion", "RECV"): (100, 100 * 4096), ("completion", "SEND"): (100, 0),
        ("completion", "RDMA_WRITE"): (3, 0),
        ("wqe", "RDMA_WRITE"): _wqe_totals(t, 0x08), ("wqe", "ATOMIC_FA"): _wqe_totals(t, 0x12),
        ("wqe_loss", "WQE_LOSS"): (1, e.lost_bbs[(4242, t.ga.qpn)]),
    }
    assert got[("wqe", "RDMA_WRITE")][0] + got[("wqe", "ATOMIC_FA")][0] == sum(e.wqes.values()) == 38
    [db] = rows(env, *dirs, "SELECT count(*) AS n, sum(wqes) AS w, sum(bytes) AS b, sum(lost_bbs) AS l FROM doorbells")
    assert db == {"n": 26, "w": 38, "b": sum(e.gpu_bytes.values()), "l": sum(e.lost_bbs.values())}
    # the ping-pong's sends and receives name each other's QPs across the nodes
    peers = rows(env, *dirs, "SELECT host, qpn, peer_host, peer_qpn, count(*) AS n FROM ops "
                             "WHERE kind = 'send_wr' AND op = 'SEND' GROUP BY ALL ORDER BY host")
    assert peers == [{"host": "node-a", "qpn": t.qa.qpn, "peer_host": "node-b", "peer_qpn": t.qb.qpn, "n": 50},
                     {"host": "node-b", "qpn": t.qb.qpn, "peer_host": "node-a", "peer_qpn": t.qa.qpn, "n": 50}]
    [s] = rows(env, *dirs, "SELECT count(*) AS n FROM ops WHERE signaled AND kind = 'send_wr'")
    assert s["n"] == 100 + 3
    qps = rows(env, *dirs, "SELECT host, qpn, type, origin, gpu, peer_host, peer_qpn FROM qps ORDER BY host, qpn")
    assert [(q["host"], q["origin"], q["gpu"], q["peer_host"]) for q in qps] == [
        ("node-a", "verbs", -1, "node-b"), ("node-a", "devx", 0, "node-b"),
        ("node-b", "verbs", -1, "node-a"), ("node-b", "devx", 1, "node-a")]
    calls = {r["fn"]: r["n"] for r in rows(env, *dirs, "SELECT fn, count(*) AS n FROM calls GROUP BY fn")}
    assert calls["ibv_create_qp"] == 2 and calls["ibv_modify_qp"] == 6 and calls["ibv_reg_mr"] == 2
    assert rows(env, *dirs, "SELECT count(*) AS n FROM mrs WHERE dereg_ns IS NULL") == [{"n": 2}]
    procs = rows(env, *dirs, "SELECT host, pid, rank, mode, calib_points, records_dropped FROM processes ORDER BY host")
    assert procs == [{"host": "node-a", "pid": 4242, "rank": 0, "mode": "full", "calib_points": 3, "records_dropped": 0},
                     {"host": "node-b", "pid": 4242, "rank": 1, "mode": "full", "calib_points": 3, "records_dropped": 0}]


def test_cache_is_reused_and_refreshed(tmp_path, env):
    t, dirs = build_two_nodes(tmp_path / "run")
    q = "SELECT count(*) AS n FROM ops"
    first = rows(env, *dirs, q)
    [cache] = list((tmp_path / "cache" / "sigmatrace" / "parquet").iterdir())
    marker = cache / "sigmatrace-tables.json"
    stamp = marker.stat().st_mtime_ns
    assert rows(env, *dirs, q) == first and marker.stat().st_mtime_ns == stamp
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"
    # a trace that changes gets new tables
    cold = next((tmp_path / "run" / "node-a").glob("p*/cold.jsonl"))
    with open(cold, "a") as f:
        f.write(json.dumps({"ev": "pd_alloc", "ts": 1, "tid": 4242, "fn": "ibv_alloc_pd", "pd": 1, "ctx": 1}) + "\n")
    before = rows(env, *dirs, "SELECT count(*) AS n FROM calls")
    assert len(list((tmp_path / "cache" / "sigmatrace" / "parquet").iterdir())) == 2
    calls = rows(env, *dirs, "SELECT count(*) AS n FROM calls WHERE fn = 'ibv_alloc_pd' AND host = 'node-a'")
    assert calls == [{"n": 2}] and before[0]["n"] > 0


def test_export_then_query_its_tables(tmp_path, env):
    t, dirs = build_two_nodes(tmp_path / "run")
    subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "export", *map(str, dirs), "--parquet",
                    str(tmp_path / "tables"), "-q"], check=True, timeout=120, env=env)
    assert rows(env, "--parquet", tmp_path / "tables", "SELECT count(*) AS n FROM doorbells") == [{"n": 26}]
    assert not (tmp_path / "cache").exists()


def test_formats(tmp_path, env):
    t, dirs = build_two_nodes(tmp_path / "run")
    q = "SELECT host, count(*) AS n FROM doorbells GROUP BY host ORDER BY host"
    assert sql(env, *dirs, q, "--format", "csv").stdout.splitlines() == ["host,n", "node-a,21", "node-b,5"]
    table = sql(env, *dirs, q).stdout
    assert "node-a" in table and "21" in table and "node-b" in table


def test_bad_query_is_one_line(tmp_path, env):
    t, dirs = build_two_nodes(tmp_path / "run")
    r = sql(env, *dirs, "SELECT nope FROM ops", check=False)
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()[-1:]
    assert "SQL error" in line and "nope" in line and "Traceback" not in r.stderr


def test_tables_inside_the_trace_and_any_order(tmp_path, env):
    """Tables written into the trace directory are not part of its fingerprint, and the same
    traces given in another order reuse the same tables."""
    t, dirs = build_two_nodes(tmp_path / "run")
    inside = dirs[0] / "tables"
    q = "SELECT count(*) AS n FROM doorbells"
    assert rows(env, *dirs, q, "--parquet", inside) == [{"n": 26}]
    stamp = (inside / "sigmatrace-tables.json").stat().st_mtime_ns
    assert rows(env, *reversed(dirs), q, "--parquet", inside) == [{"n": 26}]
    assert (inside / "sigmatrace-tables.json").stat().st_mtime_ns == stamp


def test_queries_reach_no_file_but_the_tables(tmp_path, env):
    """The connection is locked once the tables are open: no other file read or written, no
    database attached, no extension installed or loaded; each refusal is one line."""
    t, dirs = build_two_nodes(tmp_path / "run")
    secret = tmp_path / "secret.txt"
    secret.write_text("password\n")
    out = tmp_path / "out"
    out.mkdir()
    attacks = {
        "read": f"SELECT * FROM read_csv('{secret}')",
        "copy": f"COPY (SELECT 1) TO '{out}/x.csv'",
        "attach": f"ATTACH '{out}/new.db' AS n",
        "install": "INSTALL httpfs",
        "load": "LOAD httpfs",
        "unlock": "SET enable_external_access = true",
    }
    for name, q in attacks.items():
        r = sql(env, *dirs, q, check=False)
        assert r.returncode == 1, (name, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sigmatrace: error: SQL error"), (name, r.stderr)
        assert "password" not in r.stdout + r.stderr
    assert list(out.iterdir()) == []
    # nor can a query overwrite the tables it reads (DuckDB may read those files)
    [cache] = list((tmp_path / "cache" / "sigmatrace" / "parquet").iterdir())
    ops = sorted((cache / "ops").glob("node=*/rank=*/part-*.parquet"))[0]     # a partition of the ops table
    before = ops.read_bytes()
    r = sql(env, *dirs, f"COPY (SELECT 1 AS a) TO '{ops}' (FORMAT parquet, USE_TMP_FILE false)", check=False)
    assert r.returncode == 1 and "COPY writes files" in r.stderr and ops.read_bytes() == before
    # normal queries still work, the views' joins with qps included
    assert rows(env, *dirs, "SELECT count(*) AS n FROM doorbells") == [{"n": 26}]
    assert rows(env, *dirs, "SELECT count(*) AS n FROM ops WHERE peer_host = 'node-b' AND kind = 'send_wr'") == \
        [{"n": 50 + 12}]


def test_allow_files_lifts_the_lock(tmp_path, env):
    t, dirs = build_two_nodes(tmp_path / "run")
    data = tmp_path / "extra.csv"
    data.write_text("a,b\n1,2\n")
    assert rows(env, *dirs, f"SELECT * FROM read_csv('{data}')", "--allow-files") == [{"a": 1, "b": 2}]
    sql(env, *dirs, f"COPY (SELECT 7 AS x) TO '{tmp_path}/y.csv'", "--allow-files")
    assert (tmp_path / "y.csv").read_text().splitlines() == ["x", "7"]


def test_tables_never_replace_what_is_not_ours(tmp_path, env):
    """--parquet DIR is built anew only where nothing is or where our tables are: a directory
    of other files (it used to be deleted whole), a file or a link is one line of error."""
    t, dirs = build_two_nodes(tmp_path / "run")
    q = "SELECT count(*) AS n FROM doorbells"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine\n")
    (tmp_path / "file").write_text("mine\n")
    (tmp_path / "link").symlink_to(theirs)
    for target, words in ((theirs, "not sigmatrace tables"), (tmp_path / "file", "not a directory"),
                          (tmp_path / "link", "symbolic link")):
        r = sql(env, *dirs, q, "--parquet", target, check=False)
        assert r.returncode == 1 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert [p.name for p in theirs.iterdir()] == ["notes.txt"] and (theirs / "notes.txt").read_text() == "mine\n"
    assert (tmp_path / "file").read_text() == "mine\n"


def test_rebuild_builds_the_tables_again(tmp_path, env):
    t, dirs = build_two_nodes(tmp_path / "run")
    tables = tmp_path / "tables"
    q = "SELECT count(*) AS n FROM doorbells"
    assert rows(env, *dirs, q, "--parquet", tables) == [{"n": 26}]
    marker = tables / "sigmatrace-tables.json"
    stamp = marker.stat().st_mtime_ns
    assert rows(env, *dirs, q, "--parquet", tables) == [{"n": 26}] and marker.stat().st_mtime_ns == stamp
    assert rows(env, *dirs, q, "--parquet", tables, "--rebuild") == [{"n": 26}]
    assert marker.stat().st_mtime_ns != stamp
