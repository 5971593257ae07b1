"""One line per run of tests/gpu/device/nvshmem.sh: PE 0's p50/p99 (us) per operation, errors."""
import json
import sys
from pathlib import Path

for path in sys.argv[1:]:
    p = Path(path)
    try:
        run = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        print(f"{p.stem}: unreadable ({e.__class__.__name__})")
        continue
    pes = run.get("pes") or []
    if not pes:
        continue
    ops = pes[0].get("ops", {})
    parts = [f"{op} {o['p50_ns'] / 1e3:.2f}/{o['p99_ns'] / 1e3:.2f}" for op, o in ops.items() if "p50_ns" in o]
    errors = sum(pe.get("errors", 0) for pe in pes)
    print(f"{p.stem:28s} rc={run.get('rc')} errors={errors} " + "  ".join(parts))
