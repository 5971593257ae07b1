"""The descriptors UCX puts into its epoll set behave as the kernel's: a DevX event channel and a
completion channel are blocking until the program says otherwise, poll as not readable while
empty, a non-blocking read of an empty one fails with EAGAIN, and a DevX event buffer too
small for one event is refused with ENOSPC (the kernel's answer)."""
from __future__ import annotations

import os
import subprocess
import sys

PROBE = r"""
import ctypes, errno, fcntl, os, select
v = ctypes.CDLL("libibverbs.so.1", use_errno=True)
m = ctypes.CDLL("libmlx5.so.1", use_errno=True)
v.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
m.mlx5dv_open_device.restype = ctypes.c_void_p
m.mlx5dv_open_device.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
m.mlx5dv_devx_create_event_channel.restype = ctypes.POINTER(ctypes.c_int)
m.mlx5dv_devx_create_event_channel.argtypes = [ctypes.c_void_p, ctypes.c_int]
m.mlx5dv_devx_get_event.restype = ctypes.c_ssize_t
m.mlx5dv_devx_get_event.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
m.mlx5dv_devx_subscribe_devx_event.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint16,
                                               ctypes.c_void_p, ctypes.c_uint64]
v.ibv_create_comp_channel.restype = ctypes.POINTER(ctypes.c_int)
v.ibv_create_comp_channel.argtypes = [ctypes.c_void_p]

class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint32), ("comp_mask", ctypes.c_uint64)]

n = ctypes.c_int()
devs = v.ibv_get_device_list(ctypes.byref(n))
ctx = m.mlx5dv_open_device(devs[0], ctypes.byref(Attr(1, 0)))     # MLX5DV_CONTEXT_FLAGS_DEVX
buf = ctypes.create_string_buffer(128)

def probe(name, fd):
    print(name, "nonblock", bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK),
          "readable", bool(select.select([fd], [], [], 0)[0]))
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)

omit = m.mlx5dv_devx_create_event_channel(ctx, 1)          # OMIT_DATA: 8-byte events
probe("devx", omit[0])
r = m.mlx5dv_devx_get_event(omit, buf, 8)
print("empty", r, errno.errorcode[ctypes.get_errno()])
r = m.mlx5dv_devx_get_event(omit, buf, 4)
print("small", r, errno.errorcode[ctypes.get_errno()])
full = m.mlx5dv_devx_create_event_channel(ctx, 0)          # cookie + 64-byte EQE
r = m.mlx5dv_devx_get_event(full, buf, 8)
print("small_eqe", r, errno.errorcode[ctypes.get_errno()])
ev = (ctypes.c_uint16 * 1)(0x13)                           # SRQ_LAST_WQE: a QP's event
print("unaffiliated_qp_event", m.mlx5dv_devx_subscribe_devx_event(omit, None, 2, ev, 7))
ch = v.ibv_create_comp_channel(ctypes.c_void_p(ctx))
probe("comp", ch[2])                                       # {context, fd, refcnt}
print("comp_read", errno.errorcode[ctypes.get_errno()] if os.read(ch[2], 8) else "", flush=True)
"""


def test_event_descriptors_poll_and_block_as_the_kernels(nic_env):
    p = subprocess.run([sys.executable, "-c", PROBE], env=nic_env, capture_output=True,
                       text=True, timeout=60)
    lines = p.stdout.splitlines()
    assert lines[:6] == [
        "devx nonblock False readable False",
        "empty -1 EAGAIN",
        "small -1 ENOSPC",
        "small_eqe -1 ENOSPC",
        "unaffiliated_qp_event 22",                 # EINVAL
        "comp nonblock False readable False",
    ], p.stdout + p.stderr
    assert "BlockingIOError" in p.stderr            # os.read of the empty non-blocking channel
