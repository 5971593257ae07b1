#!/usr/bin/env bash
# The GPU-initiated checks and the doorbell benchmark on the device machine (one H200), run from a
# copy of the source tree with the native code built elsewhere (the device machine has no
# libibverbs headers).  Usage: run.sh [smoke] [checks] [bench] | all   (results under $OUT)
set -uo pipefail
what=" ${*:-all} "
has() { [[ "$what" == *" $1 "* || "$what" == *" all "* ]]; }
here=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$here"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
WHL=${WHL:-$here/../.whl}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=$here:/tmp/site PYTHONUNBUFFERED=1 SIGMATRACE_GDA_BACKEND=gpu
nvidia-smi -L; nproc; python3 --version
python3 -c 'import frida, numpy, typer, rich; print("frida", frida.__version__)'
env_sh() { python3 -c 'import shlex; from sigmatrace import gda; e = gda.environment("gpu"); print(" ".join(f"{k}={shlex.quote(v)}" for k, v in e.items() if k in ("LD_LIBRARY_PATH", "SIMNIC_DEVICES", "SIMNIC_FABRIC", "LD_AUDIT")))'; }
bin=sigmatrace/_lib/bin/gda_example
if has smoke; then
  echo "== untraced GPU example"
  for m in "--mode ops -n 2000 --qps 2 --ops write,read,fadd,writev --batch 4" "--mode latency -n 2000" \
           "--mode pingpong -n 1000" "--mode rate -n 200000 --inline --slots 256"; do
    env $(env_sh) timeout 60 $bin $m --quiet | tee -a "$OUT/untraced.jsonl"; echo "rc=$?"
  done
  echo "== traced (spawn, doorbells wqe)"
  env $(env_sh) timeout 120 python3 -m sigmatrace.cli.main spawn --quiet --out /tmp/t1-$$ -- $bin --mode ops -n 2000 --qps 2 \
    --ops write,read,fadd,writev --batch 4 --quiet --json "$OUT/traced.json"; echo "rc=$?"
  python3 -m sigmatrace.cli.main report --json /tmp/t1-$$ > "$OUT/traced_report.json"; echo "report rc=$?"
  python3 -c 'import json; r=json.load(open("'"$OUT"'/traced_report.json")); print({k: r.get(k) for k in ("doorbells","wqes","wqe_ops","wqe_losses","problems")})'
  cp /tmp/t1-$$/p*/cold.jsonl "$OUT/traced_cold.jsonl" 2>/dev/null
fi
if has checks; then
  echo "== checks (tests/gpu with the CUDA build)"
  timeout 420 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gda_trace.py 2>&1 | tee "$OUT/checks.log"
fi
if has bench; then
  echo "== benchmark"
  timeout 440 python3 bench/doorbell_bench.py --backend gpu --rounds 3 ${BENCH_ARGS:-} --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
fi
