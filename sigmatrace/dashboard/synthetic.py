"""A generator process that writes a live block the way the runtime does, at known rates.

Tests and benchmarks of the dashboard run it where no traced workload can produce an exact,
configurable rate (and before the runtime exists): it creates TRACE/p<its pid>/live.bin and
updates the counters a runtime would, from a clock, so that every counter equals rate x elapsed
time however late a tick runs.  It reports what it did to a JSON file (rates measured over its
own last second), which is what tests compare the dashboard against.

    python -m sigmatrace.dashboard.synthetic --dir TRACE --doorbell-rates 1000,4000 --ops-rates 1e6

Scenarios: `traffic` (everything hooked, counters moving), `no-rdma` (tracing works but no RDMA
library is ever loaded: providers wait, nothing flows), `stages` (the coverage stages are
reached one after another, `--stage-seconds` apart, traffic last).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from ..trace import live as lv
from ..trace import writer

IBV_WR_RDMA_WRITE = 0
MLX5_RDMA_WRITE = 0x08
BBS_PER_WQE = 1                 # a plain RDMA write with one data segment fits one basic block
VERBS_QPN_BASE = 0x100
GPU_QPN_BASE = 0x200
REMOTE_QPN_OFFSET = 0x1000      # peer of local QP q is q + REMOTE_QPN_OFFSET
PROVIDERS = ("verbs", "mlx5", "cuda")
HOOKS_PER_PROVIDER = {"verbs": 14, "mlx5": 6, "cuda": 4}


def _table(mm: np.ndarray, offset: int, slot: int, count: int, dtype: np.dtype) -> np.ndarray:
    padded = np.dtype({"names": dtype.names, "formats": [dtype.fields[n][0] for n in dtype.names],
                       "offsets": [dtype.fields[n][1] for n in dtype.names], "itemsize": slot})
    return mm[offset:offset + slot * count].view(padded)


class Generator:
    """Owns one live block and moves its counters to where the rates say they should be."""

    def __init__(self, path: Path, pid: int, doorbell_rates: list[float], ops_rates: list[float],
                 bytes_per_op: int, wqes_per_doorbell: int, gpus: int, lag: int, doorbell_mode: lv.DoorbellMode):
        self.mm = writer.create_live(path, pid, lv.Mode.SIMPLE)
        self.h = self.mm[:lv.HEADER_DTYPE.itemsize].view(lv.HEADER_DTYPE)
        self.threads = _table(self.mm, lv.THREAD_OFFSET, lv.THREAD_SIZE, lv.MAX_THREADS, lv.THREAD_DTYPE)
        self.qps = _table(self.mm, lv.QP_OFFSET, lv.QP_SIZE, lv.MAX_QPS, lv.QP_DTYPE)
        self.reps = _table(self.mm, lv.REPEATER_OFFSET, lv.REPEATER_SIZE, lv.MAX_REPEATERS, lv.REPEATER_DTYPE)
        self.db_rates = np.asarray(doorbell_rates, float)
        self.ops_rates = np.asarray(ops_rates, float)
        self.bytes_per_op = bytes_per_op
        self.wqes_per_db = wqes_per_doorbell
        self.lag = lag
        self.h["doorbell_mode"] = int(doorbell_mode)
        self.h["tsc_hz"] = _tsc_hz()
        n_gpu_qps, n_verbs = len(self.db_rates), len(self.ops_rates)
        # One thread posts on every verbs QP (the runtime keeps per-thread aggregates).
        t = self.threads[0]
        t["tid"], t["in_use"], t["name"] = pid, 1, b"generator"
        for i in range(n_verbs):
            q = VERBS_QPN_BASE + i
            t["qps"][i] = (q, q + REMOTE_QPN_OFFSET, 0, 0)
        self._n_threads = 1 if n_verbs else 0
        # Verbs QPs get a QP slot (not watched: their work is counted at post_send); GPU QPs a
        # slot watched through their own repeater.
        for i in range(n_verbs):
            self._qp_slot(i, VERBS_QPN_BASE + i, lv.QpFlag.VERBS, -1, 0xFFFFFFFF)
        for i in range(n_gpu_qps):
            q = GPU_QPN_BASE + i
            self._qp_slot(n_verbs + i, q, lv.QpFlag.DEVX | lv.QpFlag.GPU_SQ | lv.QpFlag.WATCHED, i % max(1, gpus), i)
            r = self.reps[i]
            r["uar_reg_addr"], r["fake_host"], r["fake_dptr"] = 0x7F0000000800 + i * 0x1000, 0x7E0000000000 + i * 0x1000, 0x7E0000000000 + i * 0x1000
            r["state"], r["cpu"], r["n_qps"] = int(lv.RepeaterState.SLEEPING), -1, 1
        # The tables are published (their counts set) when the hooks are installed: as in a
        # runtime, no QP or repeater exists before then.
        self._n_repeaters, self._n_qps = n_gpu_qps, n_verbs + n_gpu_qps
        self.n_verbs = n_verbs
        self.t0: float | None = None
        self.done = {"doorbells": np.zeros(n_gpu_qps, np.int64), "ops": np.zeros(n_verbs, np.int64)}

    def _qp_slot(self, i: int, qpn: int, flags: int, gpu: int, repeater: int) -> None:
        q = self.qps[i]
        q["qpn"], q["flags"], q["gpu"], q["repeater"] = qpn, int(flags), gpu, repeater
        q["sq_slots"], q["remote_qpn"] = 256, qpn + REMOTE_QPN_OFFSET

    def reach(self, stage: lv.Coverage) -> None:
        self.h["coverage"] = int(self.h["coverage"][0]) | int(stage)
        if stage == lv.Coverage.RUNTIME_READY:
            tsc, mono, real = _clock_triple()
            self.h["start_tsc"], self.h["start_mono_ns"], self.h["start_real_ns"] = tsc, mono, real
            self.h["state"] = int(lv.State.TRACING)

    def providers(self, state: lv.ProviderState) -> None:
        p = self.h["providers"][0]
        for i, name in enumerate(PROVIDERS):
            p[i]["name"] = name.encode()
            p[i]["state"] = int(state)
            p[i]["hooks"] = HOOKS_PER_PROVIDER[name] if state == lv.ProviderState.INSTALLED else 0
        self.h["n_providers"] = len(PROVIDERS)
        if state == lv.ProviderState.INSTALLED:
            self.h["n_threads"], self.h["n_qps"], self.h["n_repeaters"] = self._n_threads, self._n_qps, self._n_repeaters

    def start_traffic(self) -> None:
        self.t0 = time.monotonic()
        self.reach(lv.Coverage.RECORDS_FLOWING)
        for i in range(len(self.db_rates)):
            self.reps[i]["state"] = int(lv.RepeaterState.SPINNING if self.db_rates[i] > 0 else lv.RepeaterState.SLEEPING)

    def tick(self) -> None:
        """Bring every counter to rate x elapsed: a batch of increments, as a runtime's
        counters look to a reader between two of its looks."""
        self.h["heartbeat_tsc"] = _rdtsc()
        if self.t0 is None:
            return
        el = time.monotonic() - self.t0
        db = np.floor(self.db_rates * el).astype(np.int64)
        ops = np.floor(self.ops_rates * el).astype(np.int64)
        d_db, d_ops = db - self.done["doorbells"], ops - self.done["ops"]
        self.done["doorbells"], self.done["ops"] = db, ops
        t = self.threads[0]
        records = 0
        if self.n_verbs:
            n = int(d_ops.sum())
            t["calls"][lv.Call.POST_SEND] += n
            t["ops"][IBV_WR_RDMA_WRITE] += n
            t["bytes"][IBV_WR_RDMA_WRITE] += n * self.bytes_per_op
            t["records"] += n
            for i in range(self.n_verbs):
                t["qps"][i]["ops"] += int(d_ops[i])
                t["qps"][i]["bytes"] += int(d_ops[i]) * self.bytes_per_op
            records += n
        for i, d in enumerate(d_db):
            if not d:
                continue
            q = self.qps[self.n_verbs + i]
            wqes = int(d) * self.wqes_per_db
            q["doorbells"] += int(d)
            q["pi"] += wqes * BBS_PER_WQE
            q["wqe_pi"] = max(0, int(q["pi"]) - self.lag)
            q["wqes"] += wqes
            q["wqe_bytes"] += wqes * self.bytes_per_op
            q["wqe_ops"][MLX5_RDMA_WRITE] += wqes
            q["wqe_op_bytes"][MLX5_RDMA_WRITE] += wqes * self.bytes_per_op
            r = self.reps[i]
            r["doorbells"] += int(d)
            r["forwarded"] += int(d)
            r["last_doorbell_tsc"] = _rdtsc()
            records += int(d) * (1 + self.wqes_per_db)
        self.h["records_written"] += records
        self.h["bytes_written"] += records * 48

    def totals(self) -> dict:
        return {"doorbells": [int(x) for x in self.done["doorbells"]], "ops": [int(x) for x in self.done["ops"]]}

    def stop(self, state: lv.State) -> None:
        self.h["state"] = int(state)
        for i in range(len(self.db_rates)):
            self.reps[i]["state"] = int(lv.RepeaterState.STOPPED)
        self.mm.flush()


class Reporter:
    """Writes what the generator did, with rates measured over its own last second."""

    def __init__(self, path: Path | None, gen: Generator, config: dict):
        self.path = path
        self.gen = gen
        self.config = config
        self.samples: list[tuple[float, dict]] = []

    def write(self, final: bool = False) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        tot = self.gen.totals()
        self.samples.append((now, tot))
        while len(self.samples) > 2 and self.samples[1][0] <= now - 1.0:
            self.samples.pop(0)
        t0, old = self.samples[0]
        dt = now - t0
        rates = None
        if dt >= 0.5:
            rates = {k: [(b - a) / dt for a, b in zip(old[k], tot[k])] for k in tot}
        doc = {"pid": os.getpid(), "config": self.config, "totals": tot, "rates_last_second": rates,
               "elapsed": (now - self.gen.t0) if self.gen.t0 else 0.0, "final": final}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.path)


def _rdtsc() -> int:
    from .._native import lib
    return int(lib.st_py_rdtsc())


def _clock_triple() -> tuple[int, int, int]:
    from .._native import ffi, lib
    out = ffi.new("uint64_t[3]")
    lib.st_py_clock_triple(out)
    return int(out[0]), int(out[1]), int(out[2])


def _tsc_hz() -> float:
    a = _clock_triple()
    time.sleep(0.05)
    b = _clock_triple()
    return (b[0] - a[0]) / ((b[1] - a[1]) / 1e9)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()] if text else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sigmatrace.dashboard.synthetic", description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="trace directory; the live block goes to DIR/p<pid>/live.bin")
    ap.add_argument("--scenario", choices=("traffic", "no-rdma", "stages"), default="traffic")
    ap.add_argument("--doorbell-rates", default="1000", help="doorbells/s of each GPU QP, comma-separated")
    ap.add_argument("--ops-rates", default="", help="posted work requests/s of each verbs QP, comma-separated")
    ap.add_argument("--bytes-per-op", type=int, default=4096)
    ap.add_argument("--wqes-per-doorbell", type=int, default=1)
    ap.add_argument("--gpus", type=int, default=1, help="GPU QPs are spread over this many GPUs")
    ap.add_argument("--lag", type=int, default=0, help="basic blocks the WQE recovery trails the producer index by")
    ap.add_argument("--doorbell-mode", choices=[m.name.lower() for m in lv.DoorbellMode], default="wqe")
    ap.add_argument("--stage-seconds", type=float, default=1.0, help="time between stages (scenario stages)")
    ap.add_argument("--tick", type=float, default=0.01, help="seconds between counter updates")
    ap.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds of traffic (0: run until signalled)")
    ap.add_argument("--report", type=Path, help="write what was done (JSON) to this file, every half second")
    args = ap.parse_args(argv)

    pid = os.getpid()
    pdir = writer.make_dir(Path(args.dir) / f"p{pid}")
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))

    def pause(seconds: float) -> None:
        end = time.monotonic() + seconds
        while not stop["now"] and time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    if args.scenario == "stages":
        pause(args.stage_seconds)  # first: no live block at all
    # A program without RDMA libraries creates no QP, no repeater, and posts nothing.
    no_rdma = args.scenario == "no-rdma"
    gen = Generator(pdir / "live.bin", pid, [] if no_rdma else _floats(args.doorbell_rates),
                    [] if no_rdma else _floats(args.ops_rates),
                    args.bytes_per_op, args.wqes_per_doorbell, args.gpus, args.lag, lv.DoorbellMode[args.doorbell_mode.upper()])
    config = {k: v for k, v in vars(args).items() if k not in ("report",)}
    config["dir"] = str(config["dir"])
    rep = Reporter(args.report, gen, config)
    step = args.stage_seconds if args.scenario == "stages" else 0.0
    for stage in (lv.Coverage.REQUESTED, lv.Coverage.AGENT_LOADED, lv.Coverage.RUNTIME_READY):
        gen.reach(stage)
        rep.write()
        pause(step)
    if args.scenario == "no-rdma":
        gen.providers(lv.ProviderState.WAITING)
    else:
        gen.providers(lv.ProviderState.WAITING)
        pause(step)
        gen.providers(lv.ProviderState.INSTALLED)
        gen.reach(lv.Coverage.HOOKS_INSTALLED)
        pause(step)
        gen.start_traffic()
    next_report = 0.0
    while not stop["now"]:
        gen.tick()
        now = time.monotonic()
        if now >= next_report:
            rep.write()
            next_report = now + 0.5
        if args.duration and gen.t0 is not None and now - gen.t0 >= args.duration:
            break
        time.sleep(args.tick)
    gen.tick()
    gen.stop(lv.State.EXITED)
    rep.write(final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
