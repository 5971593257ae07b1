"""SQL over a trace with DuckDB: the Parquet tables as views, built on first use and cached.

    con = connect(["run/node-a", "run/node-b"])             # builds or reuses the Parquet tables
    con.sql("SELECT kind, count(*) FROM ops GROUP BY kind")

The cache lives in $XDG_CACHE_HOME/sigmatrace/parquet/<key> (owner-only), where the key is a
hash of the traces' paths and of every file's size and modification time: any change to a
trace builds new tables.  `--parquet DIR` puts them where the user wants instead.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..correlate.model import RunModel
from ..correlate.output import write
from ..correlate.progress import SILENT, Progress
from ..errors import SigmatraceError, UsageError
from ..trace.writer import make_dir
from .outfile import OutputError
from .parquet import LAYOUT, MARKER, PARTITIONED, TABLES, ParquetOutput, fingerprint

# what the ops and doorbells views add to their files: the QP's GPU and peer (stored once, in
# qps) and flags spelled out
QP_JOIN = ("LEFT JOIN (SELECT host AS q_host, pid AS q_pid, qpn AS q_qpn, gpu, peer_host, peer_pid, peer_qpn "
           "FROM read_parquet('{qps}')) q ON t.host = q.q_host AND t.pid = q.q_pid AND t.qpn = q.q_qpn")
VIEWS = {
    "ops": "SELECT t.*, (t.flags & 1) = 1 AS signaled, q.gpu, q.peer_host, q.peer_pid, q.peer_qpn "
           "FROM {source} t " + QP_JOIN,
    "doorbells": "SELECT t.*, q.gpu, q.peer_host, q.peer_pid, q.peer_qpn FROM {source} t " + QP_JOIN,
}
# a partitioned table: every process's file in one scan, `node` and `rank` from the paths
PARTITIONED_SOURCE = ("read_parquet('{glob}', hive_partitioning = true, "
                      "hive_types = {{'node': VARCHAR, 'rank': INTEGER}})")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sigmatrace" / "parquet"


def tables_ready(directory: Path, key: str | None = None) -> bool:
    m = directory / MARKER
    if not m.exists():
        return False
    if key is None:
        return True
    try:
        doc = json.loads(m.read_text())
    except ValueError:
        return False
    return doc.get("key") == key and doc.get("layout") == LAYOUT    # tables of an older layout: built anew


def build_tables(paths: list[str | os.PathLike], directory: Path, progress: Progress = SILENT) -> dict:
    """Export the traces' Parquet tables into `directory` (and mark it complete)."""
    key = fingerprint(paths)
    _replaceable(directory)
    tmp = directory.with_name(directory.name + ".building")
    if tmp.is_symlink():
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    res = write(RunModel.load(paths, progress), [ParquetOutput(tmp, key=key)])
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return {"result": res, "key": key}


def _replaceable(directory: Path) -> None:
    """Tables are built anew where nothing is, or in place of tables of ours: never over a link,
    a file, or a directory holding anything else (it would be deleted)."""
    if directory.is_symlink():
        raise OutputError(f"cannot write into {directory}: it is a symbolic link (not followed)",
                          hint="give the directory itself")
    if not directory.exists():
        return
    if not directory.is_dir():
        raise OutputError(f"cannot write into {directory}: it exists and is not a directory", hint="choose a directory")
    if not (directory / MARKER).exists() and any(directory.iterdir()):
        raise OutputError(f"{directory} holds files that are not sigmatrace tables",
                          hint="give a new or empty directory to --parquet")


def ensure_tables(paths: list[str | os.PathLike], parquet_dir: str | os.PathLike | None,
                  progress: Progress = SILENT, rebuild: bool = False) -> tuple[Path, object | None]:
    """The directory holding the tables, building them if needed; and the build's result."""
    if parquet_dir is not None and not paths:
        d = Path(parquet_dir)
        if not tables_ready(d):
            raise OutputError(f"{d}: no sigmatrace Parquet tables here", hint="give the trace directories to build them")
        return d, None
    if not paths:
        raise UsageError("no trace directory given", hint="sigmatrace sql TRACE... \"SELECT ...\"")
    key = fingerprint(paths)
    if parquet_dir is not None:
        d = Path(parquet_dir)
    else:
        make_dir(cache_root())
        d = cache_root() / key
    if rebuild or not tables_ready(d, key):
        built = build_tables(paths, d, progress)
        return d, built["result"]
    return d, None


# statements that write files even where DuckDB may read them (the tables themselves)
WRITING_STATEMENTS = ("COPY", "EXPORT")
LOCKED_HINT = "sigmatrace sql reads only the trace's tables; --allow-files lets a query use other files"


def connect(directory: Path, allow_files: bool = False):
    """A DuckDB connection with one view per table (a partitioned table: one view over all its
    files).  Unless `allow_files`, the connection is then locked: it reads the tables' files and
    nothing else (no other file, no ATTACH, no extension installed or loaded, no setting changed
    back)."""
    import duckdb
    con = duckdb.connect()
    qps = str(directory / "qps.parquet").replace("'", "''")
    files, dirs = [], []
    for t in TABLES:
        f = directory / f"{t}.parquet"
        part = directory / t
        if t in PARTITIONED and part.is_dir() and not part.is_symlink():
            lit = str(part.resolve()).replace("'", "''")
            dirs.append(f"'{lit}/'")
            source = PARTITIONED_SOURCE.format(glob=f"{lit}/*/*/*.parquet")
        elif f.exists():             # one file: tables of earlier versions, and the small ones
            lit = str(f).replace("'", "''")
            files.append(f"'{lit}'")
            source = f"read_parquet('{lit}')"
        else:
            continue
        body = VIEWS.get(t, "SELECT * FROM {source}").format(source=source, qps=qps)
        con.execute(f"CREATE VIEW {t} AS {body}")
    if not allow_files:
        con.execute(f"SET allowed_paths = [{', '.join(files)}]")
        con.execute(f"SET allowed_directories = [{', '.join(dirs)}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        con.execute("SET lock_configuration = true")
    return con


def query(con, sql: str, allow_files: bool = False):
    """Run `sql`; our error for a bad query (one line, with DuckDB's reason)."""
    import duckdb
    try:
        if not allow_files:
            for st in con.extract_statements(sql):
                if st.type.name in WRITING_STATEMENTS:
                    raise SigmatraceError(f"SQL error: {st.type.name} writes files", hint=LOCKED_HINT)
        return con.sql(sql)
    except duckdb.PermissionException as e:
        raise SigmatraceError(f"SQL error: {str(e).splitlines()[0]}", hint=LOCKED_HINT) from None
    except duckdb.Error as e:
        raise SigmatraceError(f"SQL error: {str(e).splitlines()[0]}",
                              hint="tables: " + ", ".join(TABLES) + " (docs/export.md has their columns)") from None
