"""Random damage to traces, each case through report --json, export --perfetto, sql and matrix
(their code paths, called in-process): no exception escapes, none hangs, every damage the format
can detect is named among the problems of each, by its file, and the report shows everything the
export noticed.  The traces: a synthetic two-node one (GPU doorbells and WQEs included) and,
where ibv_rc_pingpong is installed, both sides of a real capture on the emulated NIC, made once,
in the stream format the runtime writes (version 2, blocks) and rewritten as version 1; cases
alternate between them.

Seeded and reproducible: SIGMATRACE_FUZZ_SEED (default below) and SIGMATRACE_FUZZ_CASES pick the
run, SIGMATRACE_FUZZ_CASE=N replays one case.  A failure prints the seed, the case and the
mutation.  Cases run in two worker processes (CI has two cores).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from sigmatrace.trace import format as fmt
from sigmatrace.trace import live as lv
from sigmatrace.trace import schema

SEED = int(os.environ.get("SIGMATRACE_FUZZ_SEED", "1412"))
CASES = int(os.environ.get("SIGMATRACE_FUZZ_CASES", "2000"))
ONLY = os.environ.get("SIGMATRACE_FUZZ_CASE")
CASE_LIMIT_S = 20          # a case is tiny (~50 ms): a hang, not a slow machine, reaches this
WORKERS = 2
HDR, REC = fmt.STREAM_HEADER_SIZE, fmt.RECORD_SIZE


# ---- the commands, in-process ------------------------------------------------------------------

def run_commands(dirs: list[Path], out: Path) -> dict[str, list[str]]:
    """report --json, export --perfetto, sql and matrix over `dirs`, as the CLI runs them; the
    problems each reported.  The one place that knows the correlate/export API."""
    from sigmatrace.correlate.matrix import build
    from sigmatrace.correlate.model import RunModel
    from sigmatrace.correlate.output import write
    from sigmatrace.export.parquet import ParquetOutput
    from sigmatrace.export.perfetto import PerfettoOutput
    from sigmatrace.export.sql import connect, query
    from sigmatrace.report import build_report
    from sigmatrace.trace.reader import TraceDir

    report = []
    for d in dirs:
        rep = build_report(TraceDir(d))
        json.dumps(rep, default=int)          # what report --json prints
        report += rep["problems"]
    # export --perfetto, and the tables `sql` builds, in one pass (as `export --perfetto --parquet`)
    model = RunModel.load(dirs)
    shutil.rmtree(out / "tables", ignore_errors=True)
    (out / "trace.pftrace").unlink(missing_ok=True)
    res = write(model, [PerfettoOutput(out / "trace.pftrace"), ParquetOutput(out / "tables")])
    # DuckDB takes ~70 ms to open: one connection per tables directory, whose views read the
    # files again at each query
    con = _connections.get(out) or _connections.setdefault(out, connect(out / "tables"))
    query(con, "SELECT kind, count(*), sum(bytes) FROM ops GROUP BY ALL").fetchall()
    sql = [r[0] for r in query(con, "SELECT path || coalesce(' at byte ' || \"offset\", '') || ': ' || what "
                                    "FROM problems").fetchall()]
    matrix_model = RunModel.load(dirs)
    build(matrix_model, "process").to_json()
    return {"report": report, "export": [str(p) for p in res.problems], "sql": sql,
            "matrix": [str(p) for p in matrix_model.problems]}


_connections: dict = {}


# ---- the traces ----------------------------------------------------------------------------------

def build_base(root: Path) -> list[Path]:
    """Two nodes, verbs ping-pong, RDMA writes, GPU doorbells and WQEs (tests/export/conftest.py)."""
    from tests.export.conftest import build_two_nodes
    return build_two_nodes(root, iters=12)[1]


PINGPONG = shutil.which("ibv_rc_pingpong")


def capture_real(root: Path) -> list[Path]:
    """Both sides of Debian's ibv_rc_pingpong, each under `sigmatrace spawn --mode full`, on the
    emulated NIC: what the runtime and the agent really write."""
    import socket
    import subprocess
    import sys
    import time

    from sigmatrace.simnic import cleanup, environment, unique_fabric
    fabric = unique_fabric()
    env = {**os.environ, **environment(devices=1, fabric=fabric)}
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    spawn = [sys.executable, "-m", "sigmatrace.cli.main", "spawn", "-q", "--mode", "full", "--out"]
    args = [PINGPONG, "-n", "40", "-s", "1024", "-p", str(port)]
    server = subprocess.Popen([*spawn, str(root / "server"), "--", *args], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        client = subprocess.run([*spawn, str(root / "client"), "--", *args, "127.0.0.1"], env=env, timeout=120,
                                capture_output=True, start_new_session=True)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        cleanup(fabric)
    assert client.returncode == 0 and server.returncode == 0, (client.stderr, server.stderr.read())
    # the same capture twice: as the runtime wrote it (stream format 2, blocks) and rewritten as
    # version 1, so that both formats meet every kind of damage
    shutil.copytree(root, root.with_name(root.name + "-v2"))
    for side in ("server", "client"):
        _streams_as_version_1(root / side)
    return [root / "server", root / "client"]


def _streams_as_version_1(trace: Path) -> None:
    """The runtime writes stream format 2 (blocks); a copy of the real trace is rewritten as
    version 1, record for record, so that version 1's damage is met by real records too."""
    from sigmatrace.trace.reader import StreamFile
    from sigmatrace.trace.writer import StreamWriter

    for p in sorted(trace.rglob("streams/*.bin")):
        s = StreamFile(p)
        if s.version == fmt.FORMAT_VERSION_RECORDS:
            continue
        recs = s.read()
        assert s.problems == [] and list(recs["seq"]) == list(range(1, len(recs) + 1)), p
        p.unlink()
        with StreamWriter(p, s.header.pid, s.header.tid, s.header.name, s.header.clock) as w:
            w.write(recs)


# ---- mutations -----------------------------------------------------------------------------------

@dataclass
class Mutation:
    path: Path            # the file changed
    kind: str
    detail: str
    detectable: bool      # the format can tell: it must be named among the problems

    def __str__(self) -> str:
        return f"{self.kind} of {self.path}: {self.detail} ({'detectable' if self.detectable else 'not detectable'})"


def _wrong_value(want: str, rng):
    """A JSON value that is not of FORMAT.md's type `want` (schema.py)."""
    choices = [c for c in (5, -1, "x", [1], {"a": 1}, 1.5, True) if not schema.fits(c, want)]
    return choices[int(rng.integers(len(choices)))]


def _stream_flip_detectable(data: bytes, off: int, new: int) -> bool:
    if off < HDR:
        if off < 16:       # magic, version, record size
            return True
        if 16 <= off < 24:                        # pid, tid: below Linux's PID_MAX_LIMIT
            field = bytearray(data[16:24])
            field[off - 16] = new
            return max(int.from_bytes(field[:4], "little"), int.from_bytes(field[4:], "little")) >= 1 << 22
        if 24 <= off < 28:
            clock = bytearray(data[24:28])
            clock[off - 24] = new
            return int.from_bytes(clock, "little") not in (0, 1)
        return False       # flags, name: not checked
    r, b = divmod(off - HDR, REC)
    rec = bytearray(data[HDR + r * REC:HDR + (r + 1) * REC])
    rec[b] = new
    v = np.frombuffer(bytes(rec), dtype=fmt.RECORD_DTYPE)[0]
    if b >= 44:                                   # seq
        return True
    if not 1 <= int(v["type"]) <= max(fmt.RecType):
        return True
    if int(v["ts"]) >= 1 << 63:
        return True
    if int(v["type"]) == fmt.RecType.CALIB:
        return int(v["ts"]) == 0 or int(v["extra"]) == 0 or int(v["addr"]) >= 1 << 63 or int(v["extra"]) >= 1 << 63
    return False


def _blocks_of(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of each block of an undamaged version 2 stream."""
    out, off = [], HDR
    while off < len(data):
        size = int.from_bytes(data[off + 4:off + 8], "little")
        out.append((off, size))
        off += size
    return out


def _block_header_sound(h: bytes) -> bool:
    """FORMAT.md's rules for a block header: magic, count 1..16384, a nonzero first seq, each
    width one of 0/1/2/4/8 and at most its field's size (the twelfth 0), size as the widths say."""
    v = np.frombuffer(h, fmt.BLOCK_HEADER_DTYPE)[0]
    widths = [int(w) for w in v["width"]]
    if int(v["magic"]) != fmt.BLOCK_MAGIC or not 0 < int(v["count"]) <= fmt.BLOCK_MAX_RECORDS or int(v["first_seq"]) == 0:
        return False
    if any(w not in fmt.BLOCK_WIDTHS or w > int(most) for w, most in zip(widths, fmt.BLOCK_MAX_WIDTH)):
        return False
    return int(v["size"]) == fmt.block_size(int(v["count"]), widths)


def _records_detectable(recs: np.ndarray) -> bool:
    """Records a reader must refuse: an unknown type, a timestamp beyond 63 bits, a calibration
    with a zero or impossible clock value (FORMAT.md, "Damage readers detect")."""
    for v in recs:
        if not 1 <= int(v["type"]) <= max(fmt.RecType) or int(v["ts"]) >= 1 << 63:
            return True
        if int(v["type"]) == fmt.RecType.CALIB and (int(v["ts"]) == 0 or int(v["extra"]) == 0 or
                                                  int(v["addr"]) >= 1 << 63 or int(v["extra"]) >= 1 << 63):
            return True
    return False


def _block_flip_detectable(data: bytes, off: int, new: int) -> bool:
    """Whether changing byte `off` of a version 2 stream to `new` is damage the format shows."""
    from sigmatrace.trace.reader import decode_block

    if off < HDR:
        return _stream_flip_detectable(data, off, new)
    for start, size in _blocks_of(data):
        if start <= off < start + size:
            break
    hb = fmt.BLOCK_HEADER_SIZE
    changed = bytearray(data[start:start + size])
    changed[off - start] = new
    if off - start < hb:
        if 28 <= off - start < hb:          # reserved: not checked
            return False
        # an unsound header is reported and skipped; a sound one that differs changes where
        # the records' seq starts or how many there are: a jump at this block or the next, or
        # fewer records than the live block counted
        return True
    v = np.frombuffer(bytes(changed[:hb]), fmt.BLOCK_HEADER_DTYPE)[0]
    before = decode_block(data, int(v["count"]), int(v["first_seq"]), v["width"], at=start)
    after = decode_block(bytes(changed), int(v["count"]), int(v["first_seq"]), v["width"])
    moved = before != after
    return _records_detectable(after[moved])


def _lines_sound(data: bytes) -> bool:
    if data and not data.endswith(b"\n"):
        return False
    for line in data.split(b"\n"):      # as the reader splits (JSON allows \r as white space)
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            return False
        if not isinstance(ev, dict) or "ev" not in ev:
            return False
    return True


_files: dict = {}


def mutate(root: Path, rng: np.random.Generator) -> Mutation:
    """One random damage to a file of the trace under `root`, applied in place."""
    files = _files.get(root) or _files.setdefault(root, sorted(p for p in root.rglob("*") if p.is_file()))
    streams = [p for p in files if p.suffix == ".bin" and p.parent.name == "streams"]
    colds = [p for p in files if p.name == "cold.jsonl"]
    jsons = [p for p in files if p.name in ("meta.json", "session.json")]
    lives = [p for p in files if p.name == "live.bin"]
    pick = lambda xs: xs[int(rng.integers(len(xs)))]      # noqa: E731
    kind = pick(["stream_truncate", "stream_flip", "stream_flip", "stream_flip", "stream_swap", "cold_truncate",
                 "cold_flip", "cold_wrong_type", "json_wrong_type", "json_truncate", "json_delete",
                 "live_truncate", "live_flip"])
    if kind.startswith("stream"):
        p = pick(streams)
        data = bytearray(p.read_bytes())
        if int.from_bytes(data[8:12], "little") == fmt.FORMAT_VERSION:
            return _mutate_blocks(p, kind, data, rng)
        n = (len(data) - HDR) // REC
        if kind == "stream_truncate":
            size = int(rng.integers(len(data)))
            p.write_bytes(bytes(data[:size]))
            return Mutation(p, kind, f"cut to {size} of {len(data)} bytes", True)
        if kind == "stream_swap" and n >= 2:
            i, j = sorted(int(x) for x in rng.choice(n, 2, replace=False))
            a, b = data[HDR + i * REC:HDR + (i + 1) * REC], data[HDR + j * REC:HDR + (j + 1) * REC]
            data[HDR + i * REC:HDR + (i + 1) * REC], data[HDR + j * REC:HDR + (j + 1) * REC] = b, a
            p.write_bytes(bytes(data))
            return Mutation(p, kind, f"records {i} and {j} swapped", a != b)
        off = int(rng.integers(len(data)))
        new = data[off] ^ int(rng.integers(1, 256))
        detectable = _stream_flip_detectable(bytes(data), off, new)
        data[off] = new
        p.write_bytes(bytes(data))
        return Mutation(p, "stream_flip", f"byte {off} set to {new:#04x}", detectable)
    if kind.startswith("cold"):
        p = pick(colds)
        data = bytearray(p.read_bytes())
        if kind == "cold_truncate":
            size = int(rng.integers(len(data)))
            p.write_bytes(bytes(data[:size]))
            return Mutation(p, kind, f"cut to {size} of {len(data)} bytes", True)   # the live block counts lines
        if kind == "cold_flip":
            off = int(rng.integers(len(data)))
            data[off] ^= int(rng.integers(1, 256))
            p.write_bytes(bytes(data))
            return Mutation(p, kind, f"byte {off} set to {data[off]:#04x}", not _lines_sound(bytes(data)))
        lines = bytes(data).splitlines(keepends=True)
        k = int(rng.integers(len(lines)))
        ev = json.loads(lines[k])
        typed = [f for f in ev if f in schema.COLD or f in schema.COLD_BY_EV.get(ev.get("ev"), {})]
        f = pick(sorted(typed))
        ev[f] = _wrong_value(schema.COLD_BY_EV.get(ev.get("ev"), {}).get(f) or schema.COLD[f], rng)
        lines[k] = (json.dumps(ev) + "\n").encode()
        p.write_bytes(b"".join(lines))
        return Mutation(p, kind, f"line {k}: {f!r} set to {ev[f]!r}", True)
    if kind.startswith("json"):
        p = pick(jsons)
        if kind == "json_delete":
            p.unlink()
            return Mutation(p, kind, "removed", True)
        data = p.read_bytes()
        if kind == "json_truncate":
            size = int(rng.integers(len(data)))
            p.write_bytes(data[:size])
            try:
                detectable = not isinstance(json.loads(data[:size]), dict)
            except ValueError:
                detectable = True
            return Mutation(p, kind, f"cut to {size} of {len(data)} bytes", detectable)
        obj = json.loads(data)
        types = schema.SESSION if p.name == "session.json" else schema.META
        keys = sorted(k for k in obj if k in types and obj[k] is not None)
        k = pick(keys)
        obj[k] = _wrong_value(types[k], rng)
        p.write_text(json.dumps(obj))
        return Mutation(p, kind, f"{k!r} set to {obj[k]!r}", True)
    p = pick(lives)
    data = bytearray(p.read_bytes())
    if kind == "live_truncate":
        size = int(rng.integers(lv.FILE_SIZE))
        p.write_bytes(bytes(data[:size]))
        return Mutation(p, kind, f"cut to {size} of {len(data)} bytes", True)
    # the header and the used slots, where a changed byte matters
    off = int(rng.integers(lv.HEADER_SIZE)) if rng.random() < 0.7 else int(rng.integers(len(data)))
    data[off] ^= int(rng.integers(1, 256))
    p.write_bytes(bytes(data))
    return Mutation(p, "live_flip", f"byte {off} set to {data[off]:#04x}", off < 12)   # magic, version


def _mutate_blocks(p: Path, kind: str, data: bytearray, rng: np.random.Generator) -> Mutation:
    """The stream damages of `mutate` on a version 2 stream: whole blocks swapped, bytes of a
    block header, of its bases or of its columns changed, the file cut anywhere."""
    blocks = _blocks_of(bytes(data))
    if kind == "stream_truncate":
        # cut anywhere: inside a block, or between two (then the live block's record count tells)
        size = int(rng.integers(len(data)))
        p.write_bytes(bytes(data[:size]))
        return Mutation(p, kind, f"cut to {size} of {len(data)} bytes", True)
    if kind == "stream_swap" and len(blocks) >= 2:
        i, j = sorted(int(x) for x in rng.choice(len(blocks), 2, replace=False))
        (a0, an), (b0, bn) = blocks[i], blocks[j]
        out = data[:a0] + data[b0:b0 + bn] + data[a0 + an:b0] + data[a0:a0 + an] + data[b0 + bn:]
        p.write_bytes(bytes(out))
        return Mutation(p, "block_swap", f"blocks {i} and {j} swapped", True)   # first_seq differs
    # a block's header bytes one time in three, else anywhere
    if rng.random() < 1 / 3 and blocks:
        start = blocks[int(rng.integers(len(blocks)))][0]
        off = start + int(rng.integers(fmt.BLOCK_HEADER_SIZE))
    else:
        off = int(rng.integers(len(data)))
    new = data[off] ^ int(rng.integers(1, 256))
    detectable = _block_flip_detectable(bytes(data), off, new)
    data[off] = new
    p.write_bytes(bytes(data))
    return Mutation(p, "block_flip", f"byte {off} set to {new:#04x}", detectable)


# ---- one case ------------------------------------------------------------------------------------

class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout(f"over {CASE_LIMIT_S} s")


def check_case(bases: list[Path], work: Path, case: int) -> str | None:
    """Run case `case` on a copy of one of `bases` under `work`; None, or why it failed."""
    rng = np.random.default_rng([SEED, case])
    base = bases[case % len(bases)]
    trace = work / f"trace{case % len(bases)}"
    if not trace.exists():
        shutil.copytree(base, trace)
    dirs = sorted(p for p in trace.iterdir() if p.is_dir())
    m = mutate(trace, rng)
    try:
        return _check(m, dirs, work, case)
    finally:            # the next case starts from the undamaged trace
        shutil.copyfile(base / m.path.relative_to(trace), m.path)


def _check(m: Mutation, dirs: list[Path], work: Path, case: int) -> str | None:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_LIMIT_S)
    try:
        got = run_commands(dirs, work)
    except BaseException as e:           # noqa: BLE001 -- any escape is the failure being looked for
        return f"seed {SEED} case {case}: {m}\n{''.join(traceback.format_exception(e))}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    where = f"seed {SEED} case {case}: {m}"
    if m.detectable:
        for cmd, problems in got.items():
            if not any(p.startswith(str(m.path)) for p in problems):
                return f"{where}\n{cmd} did not name the damaged file; its problems: {problems}"
    missing = set(got["export"]) - set(got["report"])
    if missing:
        return f"{where}\nthe export noticed what the report does not show: {sorted(missing)}"
    return None


_BASES: list[Path] = []
_WORK: Path | None = None


def _worker_init(bases: list[str], work: str) -> None:
    global _BASES, _WORK
    _BASES = [Path(b) for b in bases]
    _WORK = Path(work) / f"w{os.getpid()}"
    _WORK.mkdir(parents=True, exist_ok=True)


def _worker_run(cases: list[int]) -> list[str]:
    return [f for f in (check_case(_BASES, _WORK, c) for c in cases) if f]


# ---- the test ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> list[Path]:
    """The undamaged traces: a synthetic one always, a real capture where ibv_rc_pingpong is
    installed, in both stream formats (cases then take the three in turn)."""
    root = tmp_path_factory.mktemp("fuzz-base")
    out = [root / "synth"]
    build_base(out[0])
    if PINGPONG is not None:
        out.append(root / "real")
        capture_real(out[1])
        out.append(root / "real-v2")      # capture_real's copy as the runtime wrote it
    for b in out:
        clean = run_commands(sorted(p for p in b.iterdir() if p.is_dir()), root)
        assert clean == {"report": [], "export": [], "sql": [], "matrix": []}, (b, clean)
    return out


# ~60 s on two idle cores; several times that on a loaded machine, where the suite's default
# limit would cut it short
@pytest.mark.timeout(1200)
def test_random_damage(bases, tmp_path):
    print(f"fuzz seed {SEED}, {CASES} cases (SIGMATRACE_FUZZ_SEED / SIGMATRACE_FUZZ_CASES / SIGMATRACE_FUZZ_CASE) "
          f"on {', '.join(b.name for b in bases)}")
    if ONLY is not None:
        _worker_init([str(b) for b in bases], str(tmp_path))
        failure = check_case(_BASES, _WORK, int(ONLY))
        assert failure is None, failure
        return
    chunks = [list(range(i, CASES, 40)) for i in range(40)]
    failures: list[str] = []
    with ProcessPoolExecutor(WORKERS, initializer=_worker_init,
                             initargs=([str(b) for b in bases], str(tmp_path))) as ex:
        for f in ex.map(_worker_run, chunks):
            failures += f
    assert not failures, f"{len(failures)} of {CASES} cases failed; first ones:\n\n" + "\n\n".join(failures[:5])
