#!/usr/bin/env bash
# Debian 12's UCX 1.13 (ucx_perftest, ucx_info, its libraries and transport modules, libnuma,
# libgomp) and rdma-core's ibv_rc_pingpong (bench/simnic_bench.py's ping-pong) copied into a folder that travels to the device machine, whose image has no UCX, so that
# bench/ucx_bench.py runs there on 16 idle cores over the emulated NIC (docs/cpu-wqes.md, "On 16
# cores").  Run here, on Debian 12 with ucx-utils installed:
#   bash tests/gpu/device/ucx_carry.sh [DIR]          (default .ucx, about 4 MB)
# There, from a tree whose native code was built here:
#   export PATH=$DIR/bin:$PATH LD_LIBRARY_PATH=$DIR/lib UCX_MODULE_DIR=$DIR/lib/ucx
#   python3 bench/ucx_bench.py --no-percall --rounds 5 --perftest-iters 3000
#   python3 bench/simnic_bench.py --writes 400000 --rounds 3
set -euo pipefail
dir=${1:-.ucx}
lib=/usr/lib/x86_64-linux-gnu
rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib/ucx"
cp -L /usr/bin/ucx_perftest /usr/bin/ucx_info /usr/bin/ibv_rc_pingpong "$dir/bin/"
for l in libnl-route-3.so.200 libnl-3.so.200; do cp -L "$lib/$l" "$dir/lib/"; done
for l in libucp.so.0 libuct.so.0 libucs.so.0 libucm.so.0 libucs_signal.so.0 libnuma.so.1 libgomp.so.1; do
  cp -L "$lib/$l" "$dir/lib/"
done
for m in "$lib"/ucx/*.so.0; do cp -L "$m" "$dir/lib/ucx/"; done
du -sh "$dir"
