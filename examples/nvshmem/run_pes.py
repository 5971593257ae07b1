"""Start the PEs of examples/nvshmem/nvshmem_ops on one machine, optionally each under
`sigmatrace spawn`, and collect each PE's JSON summary.

    python3 examples/nvshmem/run_pes.py --np 2 --work DIR [--trace forward|wqe --traces DIR]
        [--transport ibrc|ibgda-gpu|ibgda-cpu|p2p] -- ./nvshmem_ops [ARGS...]

Each PE gets RANK / WORLD_SIZE / LOCAL_RANK (what the program and `--out DIR/pe-{rank}` read), the
unique-id file and its JSON path in DIR.  Run it inside `sigmatrace simnic run` so that every PE
is on one emulated fabric and sees the device in /sys.  Prints one JSON object: {"rc": [...],
"pes": [summary of PE 0, ...], "wall_s": ...}; exits non-zero when a PE failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# NVSHMEM settings of each transport.  Multicast stays off on these machines; NCCL is not used
# with several PEs on one GPU; the unique-id bootstrap talks over loopback.
COMMON = {"NVSHMEM_DISABLE_NVLS": "1", "NVSHMEM_DISABLE_NCCL": "1",
          "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo", "NVSHMEM_SYMMETRIC_SIZE": "64M"}
TRANSPORTS = {
    "p2p": {},
    "ibrc": {"NVSHMEM_DISABLE_P2P": "1", "NVSHMEM_REMOTE_TRANSPORT": "ibrc", "NVSHMEM_IB_ENABLE_IBGDA": "0"},
    "ibgda-gpu": {"NVSHMEM_DISABLE_P2P": "1", "NVSHMEM_REMOTE_TRANSPORT": "ibgda", "NVSHMEM_IB_ENABLE_IBGDA": "1",
                  "NVSHMEM_IBGDA_NIC_HANDLER": "gpu"},
    "ibgda-cpu": {"NVSHMEM_DISABLE_P2P": "1", "NVSHMEM_REMOTE_TRANSPORT": "ibgda", "NVSHMEM_IB_ENABLE_IBGDA": "1",
                  "NVSHMEM_IBGDA_NIC_HANDLER": "cpu_host_memory"},
}


# Program arguments a transport needs: NVSHMEM's IBRC performs fetching atomics only through
# GDRCopy ("RMA/AMO verb 14 not implemented" without it), so there the fetch-add benchmark posts
# its add as a signal operation (the same NIC fetch-and-add, result unused).
TRANSPORT_ARGS = {"ibrc": ["--amo", "signal"]}


def pe_env(rank: int, npes: int, transport: str, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    env.update(COMMON)
    env.update(TRANSPORTS[transport])
    env.update({"RANK": str(rank), "WORLD_SIZE": str(npes), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(npes)})
    return env


def one_cpu_per_core(cpus: list[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> list[int]:
    """The first CPU of each physical core among `cpus` (hyperthread siblings left out)."""
    seen, out = set(), []
    for c in cpus:
        try:
            core = (sysfs / f"cpu{c}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            core = str(c)
        if core not in seen:
            seen.add(core)
            out.append(c)
    return out


def pe_placement(npes: int) -> list[dict[str, list[int]]] | None:
    """CPUs of each PE's program (its main thread and NVSHMEM's proxy thread), of its emulated NIC
    engine and of its repeater, on cores of their own; None where the machine has too few cores
    (the scheduler places them).  So no run of a benchmark differs from another by where the
    scheduler put these spinning threads (on the H200 the runs still spread by 20-40 %: the two
    PEs share the GPU by time slices, docs/nvshmem.md)."""
    cores = one_cpu_per_core(sorted(os.sched_getaffinity(0)))[1:]     # the first stays with the system
    if len(cores) < 4 * npes:
        return None
    return [{"app": cores[4 * r:4 * r + 2], "engine": [cores[4 * r + 2]], "repeater": [cores[4 * r + 3]]}
            for r in range(npes)]


def pe_argv(rank: int, program: list[str], work: Path, trace: str | None, traces: Path | None,
            sigmatrace: list[str], transport: str = "p2p", repeater_cpus: list[int] | None = None) -> list[str]:
    argv = [*program, *TRANSPORT_ARGS.get(transport, []), "--uid-file", str(work / "uid"),
            "--json", str(work / f"pe-{rank}.json")]
    if trace:
        # The per-PE form: {rank} expands from RANK in the PE's environment.
        pin = ["--repeater-cpus", ",".join(map(str, repeater_cpus))] if repeater_cpus else []
        argv = [*sigmatrace, "spawn", "--quiet", "--doorbells", trace, *pin, "--out", str(traces / "pe-{rank}"),
                "--", *argv]
    return argv


def start_pe(argv: list[str], env: dict[str, str], place: dict[str, list[int]] | None) -> subprocess.Popen:
    """A PE's process, on its program's CPUs with its engine's named (where it has a place)."""
    if place:
        env = dict(env, SIMNIC_ENGINE_CPUS=",".join(map(str, place["engine"])))
    app = set(place["app"]) if place else None
    return subprocess.Popen(argv, env=env, close_fds=False,
                            preexec_fn=(lambda: os.sched_setaffinity(0, app)) if app else None)


def wait_all(procs: list[subprocess.Popen], deadline: float, grace: float = 10.0) -> list[int]:
    """Wait for every PE; once one fails (or the deadline passes) the others get `grace` seconds,
    then are stopped: a PE whose peer died would wait for it forever."""
    failed_at = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and (now > deadline or any(p.poll() not in (None, 0) for p in procs)):
            failed_at = now
        if failed_at is not None and now > failed_at + grace:
            for p in procs:     # SIGTERM first: `sigmatrace spawn` passes it on and ends its trace
                if p.poll() is None:
                    p.kill() if now > failed_at + 2 * grace else p.terminate()
        time.sleep(0.05)
    return [p.wait() for p in procs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--work", type=Path, required=True, help="folder for the unique id and the summaries")
    ap.add_argument("--transport", choices=sorted(TRANSPORTS), default="ibrc")
    ap.add_argument("--trace", choices=("forward", "wqe"), default=None)
    ap.add_argument("--traces", type=Path, default=None, help="trace folders go to TRACES/pe-{rank}")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--pin", choices=("auto", "none"), default="auto",
                    help="auto: each PE's program, NIC engine and repeater on cores of their own where the "
                         "machine has 4 per PE besides the first (the benchmark's runs then compare)")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    program = a.program[1:] if a.program[:1] == ["--"] else a.program
    if not program or a.np < 2 or (a.trace and not a.traces):
        ap.error("needs a program after --, --np >= 2, and --traces with --trace")
    a.work.mkdir(parents=True, exist_ok=True)
    for old in a.work.iterdir():     # a stale unique id or meeting file would mislead the PEs
        if old.is_file():
            old.unlink()
    sigmatrace = [sys.executable, "-m", "sigmatrace.cli.main"]
    t0 = time.monotonic()
    places = pe_placement(a.np) if a.pin == "auto" else None
    procs = []
    for r in range(a.np):
        place = places[r] if places else None
        argv = pe_argv(r, program, a.work, a.trace, a.traces, sigmatrace, a.transport,
                       place["repeater"] if place else None)
        procs.append(start_pe(argv, pe_env(r, a.np, a.transport, os.environ), place))
    rcs = wait_all(procs, t0 + a.timeout)
    pes = []
    for r in range(a.np):
        path = a.work / f"pe-{r}.json"
        pes.append(json.loads(path.read_text()) if path.exists() else None)
    print(json.dumps({"transport": a.transport, "trace": a.trace, "rc": rcs, "pes": pes, "placement": places,
                      "wall_s": round(time.monotonic() - t0, 3)}))
    return 0 if all(rc == 0 for rc in rcs) and all(pes) else 1


if __name__ == "__main__":
    sys.exit(main())
