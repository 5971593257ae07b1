"""The live dashboard behind `sigmatrace top` and `--live`.

Layers, one job each:
  source.py     maps the live blocks (live.bin) of a trace directory and tails cold events
  history.py    cumulative counters sampled over time -> rates and 60-second histories
  coverage.py   what the tracer is and is not watching, from coverage bits and provider states
  frame.py      what one refresh shows: rows of Metrics (a rate and total, or why not counted)
  model.py      one refresh: a Sample of all live blocks -> a Frame
  view.py       a Frame -> a rich renderable sized to the terminal
  plain.py      a Frame -> one summary line (no terminal)
  keys.py       single-key input from a terminal (q / p / s), resizes
  app.py        the loop tying them together
  capture_live.py  the dashboard next to a capture controller (top --pid, --live)
  synthetic.py  a generator process that writes a live block at known rates (tests, bench)

Work per refresh is per batch of counters (one copy of the used live-block slots), never per
event, so the dashboard's cost does not grow with the traced program's event rate.
"""
