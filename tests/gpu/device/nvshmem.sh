#!/usr/bin/env bash
# NVSHMEM on the device machine (one H200): examples/nvshmem built with nvcc against the image's
# NVSHMEM (nvidia-nvshmem-cu13 in its Python), two PEs on the one GPU over the emulated NIC with
# each transport, untraced and under `sigmatrace spawn --out DIR/pe-{rank}`, traces compared with
# the program's counts, then the benchmark.  Run from a copy of the source tree whose native code
# was built elsewhere (the device machine has no libibverbs headers), as root (the /sys view).
#   Usage: nvshmem.sh [probe] [trace] [bench] | all        (results under $OUT)
# Environment: N (measured iterations, default 5000), WARMUP (default 1000), TRANSPORTS (default
# "ibrc ibgda-gpu ibgda-cpu"), ROUNDS (benchmark rounds, default 5), WHL (wheels folder), PE_TIMEOUT
# (seconds a run of the PEs may take, default 380), MODES (doorbell modes traced, default "forward wqe"),
# ARCHIVE_ONLY (leave only results.tgz under $OUT), BENCH_MODES (the benchmark's modes, default
# "untraced forward wqe"; a variant: wqe@wqe_copy_chunk=8), BENCH_OPS (its operations, default all).
set -uo pipefail
what=" ${*:-all} "
has() { [[ "$what" == *" $1 "* || "$what" == *" all "* ]]; }
here=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$here"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
N=${N:-5000}; WARMUP=${WARMUP:-1000}; ROUNDS=${ROUNDS:-5}
TRANSPORTS=${TRANSPORTS:-"ibrc ibgda-gpu ibgda-cpu"}
if ! python3 -c 'import frida, elftools, capstone' 2>/dev/null && [ ! -d /tmp/site/frida ]; then
  WHL=${WHL:-$here/../../.whl}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=$here:/tmp/site PYTHONUNBUFFERED=1
echo "== machine: $(nvidia-smi -L | head -1); $(nproc) cores; uid $(id -u); $(uname -r)"
nvshmem=$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])') || { echo "no nvidia.nvshmem in python3"; exit 1; }
echo "nvshmem: $nvshmem ($(python3 -m pip show nvidia-nvshmem-cu13 2>/dev/null | grep ^Version))"
prog=/tmp/nvshmem_ops
if [ ! -x $prog ]; then
  t0=$(date +%s.%N)
  nvcc -rdc=true -arch=sm_90 -O2 -I"$nvshmem/include" examples/nvshmem/nvshmem_ops.cu -o $prog \
    -L"$nvshmem/lib" -l:libnvshmem_host.so.3 -lnvshmem_device -lcuda -Xlinker -rpath -Xlinker "$nvshmem/lib" \
    > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; echo "build failed"; exit 1; }
  echo "built $prog in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
fi
simlib=$here/sigmatrace/_lib/simnic
export LD_LIBRARY_PATH=$simlib:$nvshmem/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
st() { python3 -m sigmatrace.cli.main "$@"; }
# One run of both PEs on a fabric of its own, inside the /sys view: run TRANSPORT TRACE(off|forward|wqe) TAG ARGS...
run() {
  local transport=$1 trace=$2 tag=$3; shift 3
  local work=/tmp/nvs-$tag traces=$OUT/traces-$tag topt=()
  rm -rf "$work" "$traces"
  [ "$trace" != off ] && topt=(--trace "$trace" --traces "$traces")
  timeout $((${PE_TIMEOUT:-380} + 20)) python3 -m sigmatrace.cli.main simnic run --devices 1 --fabric "nvs$$-$tag" -- \
    python3 examples/nvshmem/run_pes.py --np 2 --work "$work" --transport "$transport" "${topt[@]}" --timeout "${PE_TIMEOUT:-380}" \
    -- $prog -n "$N" --warmup "$WARMUP" "$@" > "$OUT/$tag.json" 2> "$OUT/$tag.log"
  local rc=$?
  echo "$tag rc=$rc $(cat "$OUT/$tag.json" 2>/dev/null | head -c 1500)"
  [ $rc -ne 0 ] && grep -E "WARN|ERROR|rror|fail|abort|Skipping|not support" "$OUT/$tag.log" | sort | uniq -c | sort -rn | head -25
  if [ "$trace" != off ]; then
    for pe in 0 1; do
      st report --json "$traces/pe-$pe" > "$OUT/$tag-report-$pe.json" 2> "$OUT/$tag-report-$pe.err" || cat "$OUT/$tag-report-$pe.err"
    done
    if [ -n "${BASE:-}" ]; then
      python3 examples/nvshmem/compare.py --program "$OUT/$tag.json" --reports "$OUT/$tag-report-0.json" \
        "$OUT/$tag-report-1.json" --baseline-reports "$OUT/$BASE-report-0.json" "$OUT/$BASE-report-1.json" \
        | tee "$OUT/$tag-compare.txt"
    fi
  fi
  return $rc
}
if has probe; then
  echo "== probe: each transport untraced, n=200 (NVSHMEM_DEBUG=INFO in the logs)"
  for t in p2p $TRANSPORTS; do
    N=200 WARMUP=50 NVSHMEM_DEBUG=INFO run "$t" off "probe-$t"
  done
fi
if has trace; then
  echo "== traced: each transport, both doorbell modes (n=$N), compared with the program"
  for t in $TRANSPORTS; do
    run "$t" off "untraced-$t"
    for m in ${MODES:-forward wqe}; do
      # NVSHMEM's own start and end traffic, traced the same way, is the baseline of the comparison.
      BASE= run "$t" "$m" "base-$m-$t" --ops none
      BASE=base-$m-$t run "$t" "$m" "$m-$t"
      st matrix "$OUT/traces-$m-$t/pe-0" "$OUT/traces-$m-$t/pe-1" 2>&1 | head -8
    done
  done
fi
if has bench; then
  echo "== benchmark"
  timeout 580 python3 bench/nvshmem_bench.py --prog $prog --rounds "$ROUNDS" --transports "$TRANSPORTS" \
    -n "$N" --warmup "$WARMUP" --modes "${BENCH_MODES:-untraced forward wqe}" ${BENCH_OPS:+--ops "$BENCH_OPS"} \
    --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
fi
# every summary, log and comparison in one file (the traces stay on the machine); ARCHIVE_ONLY=1
# leaves only that file under $OUT (a device run returns a few files only)
# (written beside $OUT, then moved in: tar reading the folder it writes into warns that it changed)
(cd "$OUT" && tar czf "$OUT.results.tgz" --exclude='traces-*' --exclude=results.tgz . && mv "$OUT.results.tgz" results.tgz)
if [ -n "${ARCHIVE_ONLY:-}" ]; then
  find "$OUT" -mindepth 1 -maxdepth 1 ! -name results.tgz -exec rm -rf {} +
fi
