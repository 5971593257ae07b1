"""`top`'s calls per second of each layer (verbs, UCP, UCT, libfabric) from the live block's call
slots, exact, in the model, the dashboard and the plain line."""
from __future__ import annotations

import os

from rich.console import Console

from sigmatrace.dashboard.model import DashboardModel
from sigmatrace.dashboard.plain import summary_line
from sigmatrace.dashboard.source import LiveSource
from sigmatrace.dashboard.view import render
from sigmatrace.trace import live as lv
from sigmatrace.trace import writer

from .test_plain_and_model import Block, _sample


def _text(frame, width=120, height=30) -> str:
    c = Console(width=width, height=height, force_terminal=False, color_system=None, legacy_windows=False)
    with c.capture() as cap:
        c.print(render(frame, width, height))
    return cap.get()


def test_layer_call_rates_are_exact(tmp_path):
    me = os.getpid()
    b = Block(writer.make_dir(tmp_path / f"p{me}") / "live.bin", me)
    b.ready()
    b.h["n_threads"] = 2
    for i in range(2):
        b.threads[i]["tid"], b.threads[i]["in_use"] = me + i, 1
    t0, t1 = b.threads[0], b.threads[1]

    def step():
        t0["calls"][lv.Call.UCP] += 300            # 300 ucp_put_nbx, each through one UCT call
        t0["calls"][lv.Call.UCT] += 300
        t1["calls"][lv.Call.LIBFABRIC] += 50       # 50 fi_writemsg, each one ibv_post_send
        t1["calls"][lv.Call.POST_SEND] += 50
        t1["calls"][lv.Call.POLL_CQ] += 25

    m = DashboardModel(rate_window=1.0)
    with LiveSource(tmp_path) as src:
        f = m.update(_sample(src, 10.0))
        assert not f.above_verbs and "calls " not in summary_line(f)   # nothing above verbs yet: no line
        step()
        m.update(_sample(src, 10.5))
        step()
        f = m.update(_sample(src, 11.0))
    got = {r.name: (r.calls.rate, r.calls.total) for r in f.layers}
    assert got == {"verbs": (150.0, 150.0), "ucp": (600.0, 600.0), "uct": (600.0, 600.0), "libfabric": (100.0, 100.0)}
    assert f.above_verbs
    line = summary_line(f, wall=0)
    assert "calls verbs 150/s ucp 600/s uct 600/s libfabric 100/s" in line, line
    text = _text(f)
    assert "calls    verbs 150/s  ucp 600/s  uct 600/s  libfabric 100/s" in text, text


def test_layer_rates_without_verbs_hooks(tmp_path):
    """UCX hooked, verbs not: the UCP rate is counted, the verbs one says why it is not."""
    me = os.getpid()
    b = Block(writer.make_dir(tmp_path / f"p{me}") / "live.bin", me)
    b.ready(providers=(("verbs", 1), ("ucx", 2)))
    b.h["n_threads"] = 1
    b.threads[0]["tid"], b.threads[0]["in_use"] = me, 1
    m = DashboardModel(rate_window=1.0)
    with LiveSource(tmp_path) as src:
        m.update(_sample(src, 1.0))
        b.threads[0]["calls"][lv.Call.UCP] += 40
        f = m.update(_sample(src, 2.0))
    got = {r.name: (r.calls.rate, r.calls.gap) for r in f.layers}
    assert got == {"verbs": (None, "not hooked"), "ucp": (40.0, None), "uct": (0.0, None), "libfabric": (0.0, None)}
    assert "calls verbs not hooked ucp 40.0/s uct 0/s libfabric 0/s | " in summary_line(f, wall=0)


def test_layer_tries_are_shown_beside_the_calls(tmp_path):
    """A UCT flush loop: 1,000 calls a step of which 990 were tries that did nothing (folded by
    the runtime, counted in layer_retries): the rate of each, in the model, the dashboard and the
    plain line; a layer with no tries shows none."""
    me = os.getpid()
    b = Block(writer.make_dir(tmp_path / f"p{me}") / "live.bin", me)
    b.ready()
    b.h["n_threads"] = 1
    b.threads[0]["tid"], b.threads[0]["in_use"] = me, 1
    t = b.threads[0]
    m = DashboardModel(rate_window=1.0)
    with LiveSource(tmp_path) as src:
        m.update(_sample(src, 1.0))
        t["calls"][lv.Call.UCT] += 1000
        t["layer_retries"][1] += 990
        t["calls"][lv.Call.UCP] += 10
        f = m.update(_sample(src, 2.0))
    got = {r.name: (r.calls.rate, r.tries.rate if r.tries else None) for r in f.layers}
    assert got == {"verbs": (0.0, None), "ucp": (10.0, 0.0), "uct": (1000.0, 990.0), "libfabric": (0.0, 0.0)}
    assert "calls verbs 0/s ucp 10.0/s uct 1.00k/s (tries 990/s) libfabric 0/s" in summary_line(f, wall=0)
    assert "uct 1.00k/s (990/s tries)" in _text(f)
