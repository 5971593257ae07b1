"""`sigmatrace top --trace` driven in a real terminal (tmux) against the synthetic generator, a
real process writing a live block at known rates.  Rates are compared with the rates the
generator itself reports, with 10% tolerance; timeouts are generous for a loaded 2-core box."""
from __future__ import annotations

import re
import statistics
import time

from sigmatrace.trace.writer import write_json

from .helpers import SIGMATRACE, rates_in, row, wait_for

TOP = " ".join(SIGMATRACE) + " top --trace {dir}"


def _start(tmux, trace_dir, width=80, height=24):
    tmux.start(TOP.format(dir=trace_dir), width, height)
    wait_for(lambda: "sigmatrace top" in tmux.screen(), 60, what="the dashboard to appear")


def _rate_of(lines: list[str], first_word: str, index: int = 0) -> float | None:
    ln = row(lines, first_word)
    if ln is None:
        return None
    found = rates_in(ln)
    return found[index] if len(found) > index else None


def _median_shown(tmux, first_word: str, index: int = 0, samples: int = 5) -> float:
    got = []
    for _ in range(samples):
        v = wait_for(lambda: _rate_of(tmux.lines(), first_word, index), 30, what=f"a rate on the {first_word} row")
        got.append(v)
        time.sleep(0.6)
    return statistics.median(got)


def _close(shown: float, reported: float, tol: float = 0.10) -> bool:
    return abs(shown - reported) <= tol * reported


def test_rates_shown_match_the_generator(tmux, generator, tmp_path):
    gen = generator("--doorbell-rates", "3000,800", "--ops-rates", "200000", "--gpus", "2", "--lag", "5")
    _start(tmux, gen.trace_dir)
    # QP 0x200 rings 3000/s on gpu0, 0x201 800/s on gpu1; verbs QP 0x100 posts 200k/s.
    db_200 = _median_shown(tmux, "0x200")
    db_201 = _median_shown(tmux, "0x201")
    ops_100 = _median_shown(tmux, "0x100")  # its doorbells say "not watched": the first rate is ops
    gpu0 = _median_shown(tmux, "gpu0")
    reported = gen.rates()
    assert _close(db_200, reported["doorbells"][0]), (db_200, reported)
    assert _close(db_201, reported["doorbells"][1]), (db_201, reported)
    assert _close(ops_100, reported["ops"][0]), (ops_100, reported)
    assert _close(gpu0, reported["doorbells"][0]), (gpu0, reported)
    lines = tmux.lines()
    assert "not watched" in row(lines, "0x100")  # a verbs QP's doorbells: not a zero
    assert re.search(r"\b5 BB\b", row(lines, "0x200"))  # WQE-recovery lag as generated
    total = row(lines, "total")
    assert _close(rates_in(total)[0], sum(reported["doorbells"]))
    assert "spinning" in row(lines, "#0") and "spinning" in row(lines, "#1")


def test_keys_sort_pause_and_quit_leaves_target_running(tmux, generator):
    gen = generator("--doorbell-rates", "500,4000", "--ops-rates", "100000", "--gpus", "1")
    _start(tmux, gen.trace_dir)
    wait_for(lambda: _rate_of(tmux.lines(), "0x201"), 30, what="rates")

    def qp_order():
        return [ln.split()[0] for ln in tmux.lines() if re.match(r"0x[0-9a-f]+ ", ln)]

    # default sort: doorbells/s, busiest first; a QP whose doorbells are not watched sorts last
    wait_for(lambda: qp_order() == ["0x201", "0x200", "0x100"], 20, what="doorbell order")
    tmux.keys("s")
    wait_for(lambda: "sort: bytes/s" in tmux.screen(), 20, what="sort by bytes")
    wait_for(lambda: qp_order()[0] == "0x100", 20, what="bytes order")  # 100k x 4 KiB/s
    tmux.keys("s")
    wait_for(lambda: "sort: ops/s" in tmux.screen(), 20, what="sort by ops")

    tmux.keys("p")
    wait_for(lambda: "PAUSED" in tmux.screen(), 20, what="PAUSED")
    frozen = row(tmux.lines(), "0x201")
    time.sleep(2.5)  # the generator keeps counting; the paused display must not move
    assert row(tmux.lines(), "0x201") == frozen
    tmux.keys("p")
    wait_for(lambda: "PAUSED" not in tmux.screen(), 20, what="resume")

    before = gen.read_report()["totals"]["doorbells"][1]
    tmux.keys("q")
    wait_for(lambda: "EXITED rc=0" in tmux.screen(), 30, what="top to exit after q")
    assert gen.alive()
    wait_for(lambda: gen.read_report()["totals"]["doorbells"][1] > before + 4000, 30,
             what="the generator to keep counting after top quit")


def test_resize_redraws_to_the_new_size(tmux, generator):
    gen = generator("--doorbell-rates", "1000", "--ops-rates", "1000")
    _start(tmux, gen.trace_dir)
    wait_for(lambda: _rate_of(tmux.lines(), "0x200"), 30, what="rates")

    def fits(width, height):
        lines = tmux.screen().split("\n")
        body = [ln for ln in lines if ln.strip()]
        # the key line is the last line of the screen, and nothing is wider than the terminal
        return (len(lines) >= height and lines[height - 1].startswith("q quit")
                and all(len(ln) <= width for ln in body))

    wait_for(lambda: fits(80, 24), 20, what="80x24 layout")
    qp_header = row(tmux.lines(), "QP")
    assert "peer" not in qp_header  # no room for the peer column at 80 wide
    tmux.resize(120, 35)
    assert tmux.size() == (120, 35)
    wait_for(lambda: fits(120, 35) and "peer" in (row(tmux.lines(), "QP") or ""), 20, what="120x35 layout")
    tmux.resize(80, 24)
    wait_for(lambda: fits(80, 24) and "peer" not in (row(tmux.lines(), "QP") or "x peer"), 20,
             what="back to 80x24")


def test_no_rdma_libraries_says_so_without_false_zeros(tmux, generator):
    gen = generator("--scenario", "no-rdma")
    _start(tmux, gen.trace_dir)
    screen = wait_for(lambda: (s := tmux.screen()) and "libibverbs not loaded" in s and s, 30,
                      what="coverage of a program without RDMA libraries")
    time.sleep(1.5)  # several refreshes later: still no number where nothing is watched
    screen = tmux.screen()
    assert "verbs waiting: libibverbs not loaded" in screen
    assert "✗ no hooks installed" in screen and "✗ no records yet" in screen
    assert "no QP seen: work requests not hooked, doorbells not hooked" in screen
    assert "doorbell values seen not hooked" in row(screen.splitlines(), "total")
    assert rates_in(screen) == [], "a rate is shown for something not watched"


def test_stages_are_shown_as_they_are_reached(tmux, generator, tmp_path):
    # The dashboard first, on a trace whose session began but has no process yet (as `spawn`
    # writes session.json before the program starts; an empty directory is not a trace); then the
    # process, whose stages come 4 s apart (the dashboard looks for new processes every second).
    write_json(tmp_path / "trace" / "session.json", {"format": "sigmatrace-trace", "version": 1,
                                                     "status": "running", "processes": []})
    _start(tmux, tmp_path / "trace")
    assert "no process traced yet" in tmux.screen()
    gen = generator("--scenario", "stages", "--stage-seconds", "4", "--doorbell-rates", "1000")
    seen = []
    end = time.monotonic() + 90
    while time.monotonic() < end:
        screen = tmux.screen()  # one capture: the count and the screen it is checked against
        cov = row(screen.splitlines(), "coverage") or ""
        reached = cov.count("✓")
        seen.append((reached, screen))
        if reached == 5 and _rate_of(screen.splitlines(), "0x200"):
            break
        time.sleep(0.2)
    counts = [c for c, _ in seen]
    assert counts == sorted(counts) and counts[-1] == 5, counts
    assert counts[0] == 0
    assert any("no live block yet" in screen for c, screen in seen if c == 0), seen[0][1]
    # until hooks are installed nothing is watched: every stage not reached says so, and no
    # rate is shown (after that a 0/s is a true zero: watched, nothing sent yet)
    for c, screen in seen:
        if c < 4:
            assert ("✗ no process traced yet" in screen
                    or "✗ no records yet" in screen and "✗ no hooks installed" in screen), screen
            assert rates_in(screen) == [], screen
    time.sleep(2.0)  # a full rate window after the traffic started
    assert _close(_median_shown(tmux, "0x200"), gen.rates()["doorbells"][0])
