"""Runs inside the rxe guest (scripts/rxe-guest.sh): Debian's RDMA programs on rxe0, each side
under `sigmatrace spawn` (or attached to), and prints one JSON object between two marker lines:
per scenario and side, the program's exit status, the end of its output and `sigmatrace report
--json` of its trace.  The host-side tests (test_rxe_programs.py) assert on it; nothing is judged
here, so one boot serves every test.  Scenarios may run several at a time (jobs(); each has its
own ports and trace directories).

    .venv/bin/python tests/rxe/guest_programs.py [SCENARIO...]   # default: all but NOT_DEFAULT
    .venv/bin/python tests/rxe/guest_programs.py fi_dgram/untraced   # the same programs, untraced
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SIGMATRACE = str(Path(sys.executable).parent / "sigmatrace")
DEV, GID, ADDR = "rxe0", "1", "10.77.0.1"  # scripts/rxe-guest.sh: rxe0 on dummy0 with ADDR
BEGIN, END = "@@rxe-results-begin@@", "@@rxe-results-end@@"
TIMEOUT = 300  # seconds for one scenario: emulated CPUs are slow, a hang must not eat the run


def jobs() -> int:
    """Scenarios at a time (RXE_JOBS): several under KVM; one under software emulation, where
    Frida's own start-up deadlines (its helper daemon's) are missed when several start at once."""
    if os.environ.get("RXE_JOBS"):
        return int(os.environ["RXE_JOBS"])
    return 4 if "rxe_accel=kvm" in Path("/proc/cmdline").read_text().split() else 1

# Sizes and counts the host-side tests assert against: they import these.
RC = dict(iters=200, size=1024)
UD = dict(iters=200, size=512)
SRQ = dict(iters=100, size=1024, qps=4)
RPING = dict(count=20, size=64)
PERF = dict(iters=200, size=4096)
# attach: the program runs about `seconds` untraced (its speed measured first: KVM or emulated CPU)
ATTACH = dict(size=64, duration=4, seconds=60, calibrate=2000, min_iters=5000)
UCX = dict(iters=100, warmup=10, size=64)
FI = dict(iters=100, size=64)
# libfabric's verbs provider takes its addresses from this interface
ENV = {"FI_VERBS_IFACE": "dummy0"}


def spawn(trace: Path, mode: str, argv: list[str]) -> list[str]:
    return [SIGMATRACE, "spawn", "-q", "--mode", mode, "--out", str(trace), "--", *argv]


def pingpong(prog: str, extra: list[str], port: int) -> tuple[list[str], list[str]]:
    base = [prog, "-d", DEV, "-g", GID, "-p", str(port), *extra]
    return base, [*base, ADDR]


def perftest(prog: str, extra: list[str], port: int) -> tuple[list[str], list[str]]:
    base = [prog, "-d", DEV, "-x", GID, "-F", "-p", str(port), "-n", str(PERF["iters"]), *extra]
    return base, [*base, ADDR]


NOT_DEFAULT: set[str] = set()  # scenarios that run only when named

UNTRACED = "/untraced"  # a scenario's name with this suffix: the same programs, not traced

# One-sided tests: the server only answers the out-of-band exchange, so only the client is traced.
CLIENT_ONLY = {"write_bw", "read_bw", "atomic_bw"}


def scenarios() -> dict[str, tuple[list[str], list[str]]]:
    """name -> (server argv, client argv); traced in full mode (both sides but CLIENT_ONLY's)."""
    s = {}
    s["rc_pingpong"] = pingpong("ibv_rc_pingpong", ["-n", str(RC["iters"]), "-s", str(RC["size"])], 18601)
    s["ud_pingpong"] = pingpong("ibv_ud_pingpong", ["-n", str(UD["iters"]), "-s", str(UD["size"])], 18602)
    s["srq_pingpong"] = pingpong("ibv_srq_pingpong", ["-n", str(SRQ["iters"]), "-s", str(SRQ["size"]),
                                                      "-q", str(SRQ["qps"])], 18603)
    rping = ["rping", "-a", ADDR, "-p", "18604", "-C", str(RPING["count"]), "-S", str(RPING["size"])]
    s["rping"] = ([*rping, "-s"], [*rping, "-c"])
    s["send_bw"] = perftest("ib_send_bw", ["-s", str(PERF["size"])], 18605)
    s["write_bw"] = perftest("ib_write_bw", ["-s", str(PERF["size"])], 18606)
    s["read_bw"] = perftest("ib_read_bw", ["-s", str(PERF["size"])], 18607)
    s["atomic_bw"] = perftest("ib_atomic_bw", [], 18608)
    for tl, port in (("rc_verbs", 18610), ("ud_verbs", 18611)):
        ucx = ["ucx_perftest", "-d", f"{DEV}:1", "-x", tl, "-t", "am_lat", "-n", str(UCX["iters"]),
               "-w", str(UCX["warmup"]), "-s", str(UCX["size"]), "-p", str(port)]
        s[f"ucx_{tl}"] = (ucx, [*ucx, ADDR])
    # rdm: over rxd (verbs' UD endpoint); rxm over its msg endpoint fails in fi_enable() on rxe0
    for ep, prov, port in (("msg", "verbs", 18612), ("rdm", "verbs;ofi_rxd", 18613), ("dgram", "verbs", 18614)):
        fi = ["fi_pingpong", "-p", prov, "-e", ep, "-I", str(FI["iters"]), "-S", str(FI["size"])]
        s[f"fi_{ep}"] = ([*fi, "-B", str(port)], [*fi, "-P", str(port), ADDR])
    fi = ["fi_pingpong", "-p", "verbs", "-e", "rdm", "-I", str(FI["iters"]), "-S", str(FI["size"])]
    s["fi_rdm_rxm"] = ([*fi, "-B", "18616"], [*fi, "-P", "18616", ADDR])
    return s


# rxm sizes its msg endpoints' CQs by the universe size: at the default 256 they are larger than
# rxe0's 32767 entries (ibv_create_cq fails, fi_enable() returns -22).  UCX's UD transport drops
# every packet rxe0 delivers in its destination-GID check (rxe's completions do not say the
# packet was IPv4, so UCX reads its IPv4 header as an IPv6 one): docs/rxe.md
SCENARIO_ENV = {"fi_rdm_rxm": {"FI_UNIVERSE_SIZE": "16"},
                "ucx_ud_verbs": {"UCX_UD_VERBS_ETH_DGID_CHECK": "n"}}


def finish(p: subprocess.Popen, deadline: float) -> dict:
    try:
        out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return {"rc": "timeout", "out": out[-4000:]}
    return {"rc": p.returncode, "out": out[-4000:]}


def start(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, **ENV, **(env or {})})


def report(trace: Path) -> dict:
    """What `sigmatrace report --json` prints, made in this process: a Python start and its
    imports cost seconds of emulated CPU each, once per trace."""
    from sigmatrace.report import build_report
    from sigmatrace.trace.reader import TraceDir

    try:
        rep = json.loads(json.dumps(build_report(TraceDir(trace)), default=int))
    except Exception as e:  # noqa: BLE001  (the tests show it; the other scenarios go on)
        return {"error": f"{type(e).__name__}: {e}"}
    rep["record_counts"] = record_counts(trace)
    rep["rdma_libraries"] = rdma_libraries(trace)
    return rep


def rdma_libraries(trace: Path) -> list[dict]:
    """The verbs libraries and providers the traced processes had mapped (meta.json)."""
    libs = {}
    for meta in trace.glob("p*/meta.json"):
        for lib in json.loads(meta.read_text()).get("libraries", []):
            name = Path(lib["path"]).name
            if name.startswith(("libibverbs", "librdmacm", "librxe", "libucp", "libuct", "libfabric")):
                # the file itself: UCX's modules load libibverbs.so.1 by its soname, through /lib
                libs[lib["path"]] = {**lib, "realpath": os.path.realpath(lib["path"])}
    return sorted(libs.values(), key=lambda lib: lib["path"])


def record_counts(trace: Path) -> dict[str, int]:
    """Full-mode records by what they say: "TYPE qpn op aux len aux32" -> count (SEND_WR: aux
    sge count, aux32 immediate or UD remote qpn; RECV_WR: aux sge count; COMPLETION: aux status,
    aux32 source qp), so a test can check every work request's QP, opcode, size and peer."""
    from collections import Counter

    import numpy as np

    from sigmatrace.trace import format as fmt
    from sigmatrace.trace.reader import TraceDir

    recs = [s.read() for p in TraceDir(trace).processes for s in p.streams()]
    if not recs:
        return {}
    recs = np.concatenate(recs)
    keep = {int(fmt.RecType.SEND_WR): "SEND_WR", int(fmt.RecType.RECV_WR): "RECV_WR",
            int(fmt.RecType.COMPLETION): "COMPLETION"}
    c = Counter()
    for r in recs:
        if int(r["type"]) in keep:
            c[f"{keep[int(r['type'])]} {r['qpn']} {r['op']} {r['aux']} {r['len']} {r['aux32']}"] += 1
    return dict(c)


def wait_listening(port: int, timeout: float = 60.0) -> None:
    """Until something listens on TCP `port` (the server side's out-of-band exchange)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
        if any(f":{port:04X} " in line and line.split()[3] == "0A" for line in text.splitlines()[1:]):
            return
        time.sleep(0.2)


def wait_cm_listening(port: int, timeout: float = 60.0) -> None:
    """Until an rdma_cm ID listens on `port` (rping's server: no TCP socket to wait for)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = subprocess.run(["rdma", "resource", "show", "cm_id"], capture_output=True, text=True)
        if any("LISTEN" in line and f":{port} " in line + " " for line in r.stdout.splitlines()):
            return
        time.sleep(0.5)


def run_pair(name: str, server: list[str], client: list[str], work: Path) -> dict:
    """Both sides (the client only: CLIENT_ONLY) under `sigmatrace spawn`; NAME/untraced: neither,
    to see what the program does by itself on rxe0."""
    t0 = time.monotonic()
    deadline = t0 + TIMEOUT
    base, traced = name.removesuffix(UNTRACED), not name.endswith(UNTRACED)
    sides = ("client",) if base in CLIENT_ONLY else ("server", "client")
    env = SCENARIO_ENV.get(base)
    srv = start(spawn(work / f"{name}-server", "full", server) if traced and "server" in sides else server, env)
    if base == "rping":
        wait_cm_listening(int(server[server.index("-p") + 1]))
    else:
        wait_listening(int(server[server.index("-B" if "-B" in server else "-p") + 1]))
    cli = start(spawn(work / f"{name}-client", "full", client) if traced else client, env)
    res = {"client": finish(cli, deadline), "server": finish(srv, deadline)}
    for side in sides if traced else ():
        res[side]["report"] = report(work / f"{name}-{side}")
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


def usec_per_iter(port: int) -> float:
    """ibv_rc_pingpong's own figure for ATTACH's messages, untraced, on this guest now."""
    server, client = pingpong("ibv_rc_pingpong", ["-n", str(ATTACH["calibrate"]), "-s", str(ATTACH["size"])], port)
    srv = start(server)
    wait_listening(port)
    cli = subprocess.run(client, capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, **ENV})
    finish(srv, time.monotonic() + 30)
    return float(cli.stdout.split("usec/iter")[0].split()[-1])


def run_attach(work: Path) -> dict:
    """Two untraced ibv_rc_pingpong sized to run about ATTACH["seconds"]; attach to the client
    for a few seconds, detach; both go on to finish with their own checks."""
    t0 = time.monotonic()
    # the faster of two measurements: a slow one (the host busy for a moment) once sized a run
    # that ended before the attach reached it; a run sized on a fast one only lasts longer
    usec = min(usec_per_iter(18615), usec_per_iter(18617))
    iters = max(ATTACH["min_iters"], int(ATTACH["seconds"] * 1e6 / usec))
    server, client = pingpong("ibv_rc_pingpong", ["-n", str(iters), "-s", str(ATTACH["size"])], 18609)
    srv = start(server)
    wait_listening(18609)
    cli = start(client)
    time.sleep(1.0)
    trace = work / "attach"
    t_attach = time.monotonic()
    att = subprocess.run([SIGMATRACE, "attach", "-q", "--pid", str(cli.pid), "--mode", "full",
                          "--duration", str(ATTACH["duration"]), "--out", str(trace)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    res = {"iters": iters,
           "attach": {"rc": att.returncode, "out": (att.stdout + att.stderr)[-4000:], "report": report(trace),
                      "seconds": round(time.monotonic() - t_attach, 1)},
           "client": finish(cli, deadline), "server": finish(srv, deadline)}
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


def main(names: list[str]) -> int:
    work = Path(tempfile.mkdtemp(prefix="rxe-"))
    table = scenarios()
    names = names or ["attach", *(n for n in table if n not in NOT_DEFAULT)]

    def one(name: str) -> dict:
        res = run_attach(work) if name == "attach" else run_pair(name, *table[name.removesuffix(UNTRACED)], work)
        print(f"{name}: {res['seconds']} s", file=sys.stderr, flush=True)
        return res

    with ThreadPoolExecutor(jobs()) as pool:
        results = dict(zip(names, pool.map(one, names)))
    print(BEGIN)
    print(json.dumps(results))
    print(END, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
