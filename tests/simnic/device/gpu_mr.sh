#!/usr/bin/env bash
# GPU memory registration with the real CUDA driver, on the device machine (one GPU): two
# processes on the emulated NIC register cuMemAlloc'ed buffers and run RDMA WRITE, READ, SEND
# and FETCH_ADD between them, each checking the bytes with cuMemcpyDtoH (tests/simnic/progs/gpu_mr.c;
# the lines it must print are in tests/simnic/test_gpu_mr.py).  The device machine has no
# libibverbs headers: build the program and the native code here first,
#   cc -O1 -Wall -I examples/rdma tests/simnic/progs/gpu_mr.c -o gpu_mr -libverbs -ldl
# and carry it with sigmatrace/_lib.  Usage: gpu_mr.sh PATH/TO/gpu_mr   (output under $OUT)
set -uo pipefail
prog=${1:?the gpu_mr program built here}
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/sigmatrace/_lib/simnic SIMNIC_DEVICES=1 SIMNIC_FABRIC=gpumr$$
nvidia-smi -L
port=$((20000 + $$ % 20000))
"$prog" -p $port > "$OUT/server.txt" 2>&1 &
srv=$!
sleep 1
timeout 60 "$prog" -p $port 127.0.0.1 > "$OUT/client.txt" 2>&1; echo "client rc=$?"
wait $srv; echo "server rc=$?"
cat "$OUT/server.txt" "$OUT/client.txt"
