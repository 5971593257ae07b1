"""Run as a script by test_cudastub.py (in its own process, so that no test process ever holds a
library named libcuda.so.1): exercises the CUDA driver test double through ctypes with the
signatures of cuda.h and prints one line per check, "name: value"."""
from __future__ import annotations

import ctypes as C
import sys

lib = C.CDLL(sys.argv[1])
u64 = C.c_ulonglong


def fn(name, *args):
    f = getattr(lib, name)
    f.restype = C.c_int
    f.argtypes = list(args)
    return f


cuInit = fn("cuInit", C.c_uint)
cuDeviceGetCount = fn("cuDeviceGetCount", C.POINTER(C.c_int))
cuDeviceGet = fn("cuDeviceGet", C.POINTER(C.c_int), C.c_int)
cuDevicePrimaryCtxRetain = fn("cuDevicePrimaryCtxRetain", C.POINTER(C.c_void_p), C.c_int)
cuCtxSetCurrent = fn("cuCtxSetCurrent", C.c_void_p)
cuCtxGetCurrent = fn("cuCtxGetCurrent", C.POINTER(C.c_void_p))
cuCtxCreate_v4 = fn("cuCtxCreate_v4", C.POINTER(C.c_void_p), C.c_void_p, C.c_uint, C.c_int)
cuCtxDestroy_v2 = fn("cuCtxDestroy_v2", C.c_void_p)
cuMemAlloc_v2 = fn("cuMemAlloc_v2", C.POINTER(u64), C.c_size_t)
cuMemFree_v2 = fn("cuMemFree_v2", u64)
cuMemcpyHtoD_v2 = fn("cuMemcpyHtoD_v2", u64, C.c_void_p, C.c_size_t)
cuMemcpyDtoH_v2 = fn("cuMemcpyDtoH_v2", C.c_void_p, u64, C.c_size_t)
cuMemcpyDtoDAsync_v2 = fn("cuMemcpyDtoDAsync_v2", u64, u64, C.c_size_t, C.c_void_p)
cuStreamCreate = fn("cuStreamCreate", C.POINTER(C.c_void_p), C.c_uint)
cuStreamSynchronize = fn("cuStreamSynchronize", C.c_void_p)
cuStreamDestroy_v2 = fn("cuStreamDestroy_v2", C.c_void_p)
cuMemHostRegister_v2 = fn("cuMemHostRegister_v2", C.c_void_p, C.c_size_t, C.c_uint)
cuMemHostUnregister = fn("cuMemHostUnregister", C.c_void_p)
cuMemHostGetDevicePointer_v2 = fn("cuMemHostGetDevicePointer_v2", C.POINTER(u64), C.c_void_p, C.c_uint)
cuPointerGetAttribute = fn("cuPointerGetAttribute", C.c_void_p, C.c_uint, u64)
cuPointerGetAttributes = fn("cuPointerGetAttributes", C.c_uint, C.POINTER(C.c_uint),
                            C.POINTER(C.c_void_p), u64)
cuGetProcAddress_v2 = fn("cuGetProcAddress_v2", C.c_char_p, C.POINTER(C.c_void_p), C.c_int, C.c_uint64,
                         C.POINTER(C.c_int))
cuGetErrorString = fn("cuGetErrorString", C.c_int, C.POINTER(C.c_char_p))
cuGetErrorName = fn("cuGetErrorName", C.c_int, C.POINTER(C.c_char_p))


def out(name, value):
    print(f"{name}: {value}")


n = C.c_int()
ctx = C.c_void_p()
d = u64()
out("count_before_init", cuDeviceGetCount(C.byref(n)))
out("init", cuInit(0))
out("count", (cuDeviceGetCount(C.byref(n)), n.value))
out("device_1", cuDeviceGet(C.byref(n), 1))
out("alloc_without_context", cuMemAlloc_v2(C.byref(d), 4096))
out("retain", cuDevicePrimaryCtxRetain(C.byref(ctx), 0))
out("set_current", cuCtxSetCurrent(ctx))
cur = C.c_void_p()
cuCtxGetCurrent(C.byref(cur))
out("current_is_primary", cur.value == ctx.value)
out("alloc", cuMemAlloc_v2(C.byref(d), 10000))
dev = d.value
out("alloc_zero", cuMemAlloc_v2(C.byref(u64()), 0))

# pointer attributes
mt = C.c_uint()
out("type_device", (cuPointerGetAttribute(C.byref(mt), 2, dev + 100), mt.value))
pc = C.c_void_p()
out("context_device", (cuPointerGetAttribute(C.byref(pc), 1, dev), pc.value == ctx.value))
start, size = C.c_void_p(), C.c_size_t()
cuPointerGetAttribute(C.byref(start), 11, dev + 5000)
cuPointerGetAttribute(C.byref(size), 12, dev + 5000)
out("range", (start.value == dev, size.value))
out("host_pointer_of_device", cuPointerGetAttribute(C.byref(C.c_void_p()), 4, dev))
ordinal = C.c_int(7)
out("ordinal", (cuPointerGetAttribute(C.byref(ordinal), 9, dev), ordinal.value))
plain = C.create_string_buffer(8192)
out("type_plain_host", cuPointerGetAttribute(C.byref(mt), 2, C.addressof(plain)))
attrs = (C.c_uint * 2)(2, 9)
mt2, ord2 = C.c_uint(99), C.c_int(99)
data = (C.c_void_p * 2)(C.cast(C.byref(mt2), C.c_void_p), C.cast(C.byref(ord2), C.c_void_p))
out("attributes_plain_host", (cuPointerGetAttributes(2, attrs, data, C.addressof(plain)), mt2.value, ord2.value))
out("attributes_device", (cuPointerGetAttributes(2, attrs, data, dev), mt2.value, ord2.value))

# copies
src = C.create_string_buffer(bytes(range(256)) * 8)
back = C.create_string_buffer(2048)
out("htod", cuMemcpyHtoD_v2(dev, src, 2048))
s = C.c_void_p()
out("stream_create", cuStreamCreate(C.byref(s), 1))
out("dtod_async", cuMemcpyDtoDAsync_v2(dev + 4096, dev, 2048, s))
out("stream_sync", cuStreamSynchronize(s))
out("dtoh", cuMemcpyDtoH_v2(back, dev + 4096, 2048))
out("roundtrip_equal", back.raw == src.raw[:2048])
out("htod_plain_host", cuMemcpyHtoD_v2(C.addressof(plain), src, 16))
out("htod_past_end", cuMemcpyHtoD_v2(dev + 9990, src, 16))
out("stream_destroy", cuStreamDestroy_v2(s))

# host registration
page = C.c_void_p(C.addressof(plain))
out("register_iomemory", cuMemHostRegister_v2(page, 4096, 0x1 | 0x2 | 0x4))
out("register_devicemap_portable", cuMemHostRegister_v2(page, 4096, 0x1 | 0x2))
out("register_again", cuMemHostRegister_v2(C.c_void_p(C.addressof(plain) + 100), 16, 0x2))
dp = u64()
out("device_pointer", (cuMemHostGetDevicePointer_v2(C.byref(dp), C.c_void_p(C.addressof(plain) + 8), 0),
                       dp.value == C.addressof(plain) + 8))
out("device_pointer_flags", cuMemHostGetDevicePointer_v2(C.byref(dp), page, 1))
out("type_registered", (cuPointerGetAttribute(C.byref(mt), 2, C.addressof(plain)), mt.value))
out("htod_registered", cuMemcpyHtoD_v2(C.addressof(plain), src, 16))
out("unregister_inside", cuMemHostUnregister(C.c_void_p(C.addressof(plain) + 8)))
out("unregister", cuMemHostUnregister(page))
out("device_pointer_unregistered", cuMemHostGetDevicePointer_v2(C.byref(dp), page, 0))

# contexts
c2 = C.c_void_p()
out("ctx_create_v4", cuCtxCreate_v4(C.byref(c2), None, 0, 0))
cuCtxGetCurrent(C.byref(cur))
out("created_is_current", cur.value == c2.value)
d2 = u64()
cuMemAlloc_v2(C.byref(d2), 64)
out("ctx_destroy", cuCtxDestroy_v2(c2))
out("freed_with_context", cuPointerGetAttribute(C.byref(mt), 2, d2.value))
cuCtxGetCurrent(C.byref(cur))
out("current_after_destroy_is_primary", cur.value == ctx.value)
out("destroy_primary", cuCtxDestroy_v2(ctx))
out("free", cuMemFree_v2(dev))
out("free_again", cuMemFree_v2(dev))

# proc addresses
pfn, st = C.c_void_p(), C.c_int(-1)


def proc(name, version, flags=0):
    st.value = -1
    rc = cuGetProcAddress_v2(name.encode(), C.byref(pfn), version, flags, C.byref(st))
    return rc, st.value, pfn.value


def addr(name):
    return C.cast(getattr(lib, name), C.c_void_p).value


def distinct(*addrs):
    return len(set(addrs)) == len(addrs) and None not in addrs


# internal entry points: not the exports, one per ABI
alloc = proc("cuMemAlloc", 13000)
out("proc_cuMemAlloc_13000", alloc[:2] + (distinct(alloc[2], addr("cuMemAlloc_v2")),))
out("proc_cuMemAlloc_3000", proc("cuMemAlloc", 3000))
v2, v3, v3b, v4 = (proc("cuCtxCreate", v)[2] for v in (11000, 12000, 12040, 13000))
out("proc_cuCtxCreate_per_version", distinct(v2, v3, v4, addr("cuCtxCreate_v4")) and v3 == v3b)
out("proc_ptds", distinct(proc("cuMemcpyHtoD", 13000, 2)[2], proc("cuMemcpyHtoD", 13000, 0)[2]))
out("proc_unknown", proc("cuNoSuchCall", 13000))
# no export starts with a jump (an interceptor would follow it into the internal entry point)
exports = ["cuMemAlloc_v2", "cuMemHostRegister_v2", "cuMemHostUnregister", "cuMemHostGetDevicePointer_v2",
           "cuMemcpyHtoD_v2", "cuGetProcAddress_v2", "cuInit", "cuStreamSynchronize"]
out("exports_begin_with_jump", [e for e in exports if C.string_at(addr(e), 1)[0] in (0xE9, 0xEB)])
# an internal entry point works like the export
alloc_fn = C.CFUNCTYPE(C.c_int, C.POINTER(u64), C.c_size_t)(alloc[2])
cuDevicePrimaryCtxRetain(C.byref(ctx), 0)
cuCtxSetCurrent(ctx)
via = u64()
out("proc_call", (alloc_fn(C.byref(via), 128), cuPointerGetAttribute(C.byref(mt), 2, via.value), mt.value))

msg = C.c_char_p()
out("error_string_1", (cuGetErrorString(1, C.byref(msg)), msg.value.decode()))
out("error_name_712", (cuGetErrorName(712, C.byref(msg)), msg.value.decode()))
out("error_name_bad", cuGetErrorName(123456, C.byref(msg)))
out("marker", C.string_at(C.addressof(C.c_char.in_dll(lib, "sigmatrace_cudastub"))).decode())
