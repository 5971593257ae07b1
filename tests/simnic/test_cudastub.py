"""The CUDA driver test double (native/cudastub -> cudastub/libcuda.so.1): its ABI against the real
cuda.h, its exports, and the driver behaviour the emulated NIC and GPU-initiated programs rely
on.  The library is only ever loaded in child processes."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sigmatrace.simnic import cudastub_dir

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "native" / "cudastub" / "cudastub.c"
LIB = cudastub_dir() / "libcuda.so.1"
CUDA_INCLUDE = next((p for p in ["/usr/local/cuda-13.0/include", "/usr/local/cuda/include"]
                     if Path(p, "cuda.h").exists()), None)


@pytest.mark.skipif(CUDA_INCLUDE is None, reason="no CUDA headers here")
def test_every_definition_matches_cuda_h():
    """Compiled as the driver is (cuda.h with __CUDA_API_VERSION_INTERNAL): a definition whose
    type differs from cuda.h's prototype is an error, one cuda.h does not declare a warning."""
    cc = shutil.which("cc") or shutil.which("gcc")
    r = subprocess.run([cc, "-std=gnu11", "-D_GNU_SOURCE", "-fsyntax-only", "-Wall", "-Werror",
                        "-Wno-unused-parameter", "-Wmissing-prototypes",
                        "-D__CUDA_API_VERSION_INTERNAL", "-DCUDASTUB_WITH_CUDA_H",
                        f"-I{CUDA_INCLUDE}", str(SRC)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _dynamic_symbols(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_exports_and_soname():
    assert LIB.exists(), "python native/build.py cudastub"
    dyn = subprocess.run(["readelf", "-d", str(LIB)], capture_output=True, text=True).stdout
    assert "Library soname: [libcuda.so.1]" in dyn
    syms = _dynamic_symbols(LIB)
    wanted = """sigmatrace_cudastub cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetCount
        cuDeviceGetName cuDeviceGetAttribute cuDeviceTotalMem_v2 cuDevicePrimaryCtxRetain
        cuDevicePrimaryCtxRelease_v2 cuCtxCreate_v2 cuCtxCreate_v4 cuCtxDestroy_v2 cuCtxSetCurrent
        cuCtxGetCurrent cuCtxPushCurrent_v2 cuCtxPopCurrent_v2 cuCtxGetDevice cuCtxSynchronize
        cuMemAlloc_v2 cuMemFree_v2 cuMemcpyHtoD_v2 cuMemcpyDtoH_v2 cuMemcpyDtoD_v2
        cuMemcpyHtoDAsync_v2 cuMemcpyDtoHAsync_v2 cuMemcpyDtoDAsync_v2 cuMemcpyHtoD_v2_ptds
        cuStreamCreate cuStreamSynchronize cuStreamDestroy_v2 cuMemHostRegister
        cuMemHostRegister_v2 cuMemHostUnregister cuMemHostGetDevicePointer_v2
        cuPointerGetAttribute cuPointerGetAttributes cuGetProcAddress cuGetProcAddress_v2
        cuGetErrorString cuGetErrorName cuStreamWaitValue32 cuStreamWaitValue32_v2
        cuStreamWriteValue32 cuStreamWriteValue32_v2 cuStreamWriteValue64 cuStreamWriteValue64_v2""".split()
    assert not [s for s in wanted if s not in syms]
    # nothing private leaks out
    assert not [s for s in syms if not (s.startswith("cu") or s == "sigmatrace_cudastub")]


def test_exports_can_be_intercepted():
    """Each export has a body of its own, long enough for an interceptor's jump (as the real
    driver's entry points): not a short stub that jumps to the entry point cuGetProcAddress
    hands out (the probe also checks that none begins with a jump)."""
    out = subprocess.run(["nm", "-S", "-D", "--defined-only", str(LIB)], capture_output=True, text=True,
                         check=True).stdout
    sizes = {f[3]: int(f[1], 16) for f in (line.split() for line in out.splitlines()) if len(f) == 4}
    short = {name: n for name, n in sizes.items() if name.startswith("cu") and n < 20}
    assert not short


def test_driver_behaviour():
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("_cudastub_probe.py")), str(LIB)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    expected = {
        "count_before_init": "3",                     # CUDA_ERROR_NOT_INITIALIZED
        "init": "0",
        "count": "(0, 1)",
        "device_1": "101",                            # CUDA_ERROR_INVALID_DEVICE
        "alloc_without_context": "201",               # CUDA_ERROR_INVALID_CONTEXT
        "current_is_primary": "True",
        "alloc": "0",
        "alloc_zero": "1",
        "type_device": "(0, 2)",                      # CU_MEMORYTYPE_DEVICE, interior pointer
        "context_device": "(0, True)",
        "range": "(True, 10000)",
        "host_pointer_of_device": "1",
        "ordinal": "(0, 0)",
        "type_plain_host": "1",                       # unknown to the driver: INVALID_VALUE
        "attributes_plain_host": "(0, 0, -2)",        # ... but defaults from cuPointerGetAttributes
        "attributes_device": "(0, 2, 0)",
        "roundtrip_equal": "True",
        "dtod_async": "0",
        "stream_sync": "0",
        "htod_plain_host": "1",
        "htod_past_end": "1",
        "register_iomemory": "1",                     # as on the H200 for ordinary memory
        "register_devicemap_portable": "0",
        "register_again": "712",                      # HOST_MEMORY_ALREADY_REGISTERED
        "device_pointer": "(0, True)",                # device pointer == host address
        "device_pointer_flags": "1",
        "type_registered": "(0, 1)",                  # CU_MEMORYTYPE_HOST
        "htod_registered": "0",
        "unregister_inside": "713",                   # HOST_MEMORY_NOT_REGISTERED
        "unregister": "0",
        "device_pointer_unregistered": "1",
        "ctx_create_v4": "0",
        "created_is_current": "True",
        "ctx_destroy": "0",
        "freed_with_context": "1",
        "current_after_destroy_is_primary": "True",
        "destroy_primary": "201",
        "free": "0",
        "free_again": "1",
        "proc_cuMemAlloc_13000": "(0, 0, True)",      # an internal entry point, not the export
        "proc_cuMemAlloc_3000": "(500, 2, None)",     # VERSION_NOT_SUFFICIENT
        "proc_cuCtxCreate_per_version": "True",       # _v2 before 11.4, _v3 to 12.4, _v4 on
        "proc_ptds": "True",
        "proc_unknown": "(500, 1, None)",             # SYMBOL_NOT_FOUND
        "proc_call": "(0, 0, 2)",
        "exports_begin_with_jump": "[]",
        "error_string_1": "(0, 'invalid argument')",
        "error_name_712": "(0, 'CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED')",
        "error_name_bad": "1",
    }
    assert {k: got.get(k) for k in expected} == expected
    assert got["marker"].startswith("sigmatrace cudastub")


def test_no_devices():
    code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); n=ctypes.c_int(-1); "
            "print(l.cuInit(0), l.cuDeviceGetCount(ctypes.byref(n)))")
    r = subprocess.run([sys.executable, "-c", code, str(LIB)], capture_output=True, text=True,
                       env={**os.environ, "CUDASTUB_DEVICES": "0"}, timeout=30)
    assert r.stdout.split() == ["100", "3"]           # NO_DEVICE; still not initialized


# The probes' common start: the primary context current, a host word registered for the device
# (`flag`, device pointer `fd`) and a non-blocking stream `s`.
_STREAM_SETUP = r'''
l.cuInit(0)
dev, ctx = ctypes.c_int(), vp()
l.cuDeviceGet(ctypes.byref(dev), 0)
l.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
l.cuCtxSetCurrent(ctx)
flag = (ctypes.c_uint32 * 1024)()
print("register:", l.cuMemHostRegister_v2(flag, 4096, 3))
fd = u64()
l.cuMemHostGetDevicePointer_v2(ctypes.byref(fd), flag, 0)
s = vp()
l.cuStreamCreate(ctypes.byref(s), 1)
'''

_WAIT_PROBE = r'''
import ctypes, sys, threading, time
l = ctypes.CDLL(sys.argv[1])
u64, vp = ctypes.c_uint64, ctypes.c_void_p
l.cuMemcpyDtoHAsync_v2.argtypes = [vp, u64, ctypes.c_size_t, vp]
l.cuMemcpyHtoD_v2.argtypes = [u64, vp, ctypes.c_size_t]
l.cuStreamWaitValue32_v2.argtypes = [vp, u64, ctypes.c_uint32, ctypes.c_uint]
l.cuStreamQuery.argtypes = l.cuStreamSynchronize.argtypes = [vp]
l.cuMemFree_v2.argtypes = [u64]
''' + _STREAM_SETUP + r'''src = u64()
l.cuMemAlloc_v2(ctypes.byref(src), 64)
dst = (ctypes.c_uint8 * 64)()
def fill(v):
    l.cuMemcpyHtoD_v2(src.value, bytes([v]) * 64, 64)
fill(1)
print("wait:", l.cuStreamWaitValue32_v2(s, fd.value, 5, 0))
print("copy:", l.cuMemcpyDtoHAsync_v2(dst, src.value, 64, s))
print("held:", l.cuStreamQuery(s), dst[0])
fill(2)                                   # written after the enqueue: the copy must see it
flag[0] = 4
time.sleep(0.02)
print("below:", l.cuStreamQuery(s), dst[0])
flag[0] = 5
print("released:", l.cuStreamSynchronize(s), dst[0], dst[63])
flag[0] = 0xfffffff0                      # GEQ is cyclic: 0x10 comes after 0xfffffff0
l.cuStreamWaitValue32_v2(s, fd.value, 0x10, 0)
fill(3)
l.cuMemcpyDtoHAsync_v2(dst, src.value, 64, s)
print("wrap_held:", l.cuStreamQuery(s), dst[0])
flag[0] = 0x10
deadline = time.monotonic() + 5           # no driver call: the stream's worker runs it
while dst[0] != 3 and time.monotonic() < deadline:
    time.sleep(0.001)
print("worker:", dst[0])
print("satisfied_now:", l.cuStreamWaitValue32_v2(s, fd.value, 0x10, 0), l.cuStreamQuery(s))
l.cuStreamWaitValue32_v2(s, fd.value, 0x20, 0)
fill(4)
l.cuMemcpyDtoHAsync_v2(dst, src.value, 64, s)
threading.Timer(0.2, lambda: flag.__setitem__(0, 0x20)).start()
t0 = time.monotonic()
r = l.cuMemFree_v2(src.value)             # frees only once the held copy has read the memory
print("free_waited:", r, time.monotonic() - t0 >= 0.15, dst[0])
print("unaligned:", l.cuStreamWaitValue32_v2(s, fd.value + 2, 0, 0))
print("bad_flags:", l.cuStreamWaitValue32_v2(s, fd.value, 0, 7))
print("legacy:", l.cuStreamWaitValue32_v2(None, fd.value, 0, 0))
'''


def test_stream_wait_value_holds_later_operations():
    """cuStreamWaitValue32 (as the tracer's armed copies use it): operations enqueued behind a
    wait that does not hold yet run, in order, once the word satisfies it (GEQ is cyclic), and
    copy what memory holds then; the stream reports NOT_READY meanwhile; with no driver call the
    stream's worker still runs them; freeing memory waits for them, as the driver synchronises."""
    r = subprocess.run([sys.executable, "-c", _WAIT_PROBE, str(LIB)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert got == {
        "register": "0",
        "wait": "0",
        "copy": "0",
        "held": "600 0",                 # CUDA_ERROR_NOT_READY, nothing copied
        "below": "600 0",
        "released": "0 2 2",
        "wrap_held": "600 2",
        "worker": "3",
        "satisfied_now": "0 0",          # a wait that already holds holds nothing
        "free_waited": "0 True 4",
        "unaligned": "1",
        "bad_flags": "1",
        "legacy": "801",                 # the stand-in holds only streams it created
    }


_WRITE_PROBE = r'''
import ctypes, sys
l = ctypes.CDLL(sys.argv[1])
u64, vp = ctypes.c_uint64, ctypes.c_void_p
l.cuStreamWaitValue32_v2.argtypes = [vp, u64, ctypes.c_uint32, ctypes.c_uint]
l.cuStreamWriteValue32_v2.argtypes = [vp, u64, ctypes.c_uint32, ctypes.c_uint]
l.cuStreamWriteValue64_v2.argtypes = [vp, u64, ctypes.c_uint64, ctypes.c_uint]
l.cuMemcpyDtoH_v2.argtypes = [vp, u64, ctypes.c_size_t]
l.cuStreamQuery.argtypes = l.cuStreamSynchronize.argtypes = [vp]
''' + _STREAM_SETUP + r'''d = u64()
l.cuMemAlloc_v2(ctypes.byref(d), 64)
out = (ctypes.c_uint64 * 2)()
def words():
    l.cuMemcpyDtoH_v2(out, d.value, 16)
    return "%x %x" % (out[0], out[1])
print("w64:", l.cuStreamWriteValue64_v2(s, d.value, 0x1122334455667788, 0), words())
print("w32:", l.cuStreamWriteValue32_v2(None, d.value + 12, 0xaabbccdd, 0), words())
l.cuStreamWaitValue32_v2(s, fd.value, 1, 0)
print("held:", l.cuStreamWriteValue64_v2(s, d.value + 8, 7, 0), l.cuStreamQuery(s), words())
flag[0] = 1
print("released:", l.cuStreamSynchronize(s), words())
print("unaligned64:", l.cuStreamWriteValue64_v2(s, d.value + 4, 0, 0))
print("unaligned32:", l.cuStreamWriteValue32_v2(s, d.value + 2, 0, 0))
print("bad_flags:", l.cuStreamWriteValue64_v2(s, d.value, 0, 2))
print("host:", l.cuStreamWriteValue32_v2(s, ctypes.addressof(out), 0, 0))
'''


def test_stream_write_value_stores_in_stream_order():
    """cuStreamWriteValue32/64 (the emulated NIC's small writes into GPU memory): an aligned
    store of one word, made in order behind a held wait; unaligned words, unknown flags and
    memory the device does not know are refused as the driver does."""
    r = subprocess.run([sys.executable, "-c", _WRITE_PROBE, str(LIB)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert got == {
        "register": "0",
        "w64": "0 1122334455667788 0",
        "w32": "0 1122334455667788 aabbccdd00000000",
        "held": "0 600 1122334455667788 aabbccdd00000000",
        "released": "0 1122334455667788 7",
        "unaligned64": "1",
        "unaligned32": "1",
        "bad_flags": "1",
        "host": "1",
    }
