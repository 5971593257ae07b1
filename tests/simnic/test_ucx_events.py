"""The descriptors UCX puts into its epoll set behave as the kernel's: a DevX event channel and a
completion channel are blocking until the program says otherwise, poll as not readable while
empty, a non-blocking read of an empty one fails with EAGAIN, and a DevX event buffer too
small for one event is refused with ENOSPC (the kernel's answer)."""
from __future__ import annotations

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


LAST_WQE = r"""
import ctypes
v = ctypes.CDLL("libibverbs.so.1", use_errno=True)
P = ctypes.c_void_p
for name, res, args in [("ibv_get_device_list", ctypes.POINTER(P), [P]), ("ibv_open_device", P, [P]),
                        ("ibv_alloc_pd", P, [P]), ("ibv_create_cq", P, [P, ctypes.c_int, P, P, ctypes.c_int]),
                        ("ibv_create_srq", P, [P, P]), ("ibv_create_qp", P, [P, P]),
                        ("ibv_modify_qp", ctypes.c_int, [P, P, ctypes.c_int]),
                        ("ibv_get_async_event", ctypes.c_int, [P, P]), ("ibv_ack_async_event", None, [P])]:
    getattr(v, name).restype, getattr(v, name).argtypes = res, args

class SrqAttr(ctypes.Structure):
    _fields_ = [("ctx", P), ("max_wr", ctypes.c_uint32), ("max_sge", ctypes.c_uint32),
                ("limit", ctypes.c_uint32)]

class QpAttr(ctypes.Structure):
    _fields_ = [("ctx", P), ("send_cq", P), ("recv_cq", P), ("srq", P), ("caps", ctypes.c_uint32 * 5),
                ("qp_type", ctypes.c_int), ("sq_sig_all", ctypes.c_int)]

class Event(ctypes.Structure):
    _fields_ = [("element", P), ("event_type", ctypes.c_int)]

ctx = v.ibv_open_device(v.ibv_get_device_list(None)[0])
pd = v.ibv_alloc_pd(ctx)
cq = v.ibv_create_cq(ctx, 16, None, None, 0)
srq = v.ibv_create_srq(pd, ctypes.byref(SrqAttr(None, 16, 1, 0)))
qp = v.ibv_create_qp(pd, ctypes.byref(QpAttr(None, cq, cq, srq, (ctypes.c_uint32 * 5)(4, 0, 1, 0, 0), 2, 0)))
state = (ctypes.c_int * 64)(6)          # struct ibv_qp_attr: qp_state IBV_QPS_ERR first
print("modify", v.ibv_modify_qp(qp, state, 1))  # IBV_QP_STATE
ev = Event()
print("get", v.ibv_get_async_event(ctx, ctypes.byref(ev)), "type", ev.event_type,
      "is_qp", ev.element == qp, flush=True)
v.ibv_ack_async_event(ctypes.byref(ev))
"""


def test_srq_qp_entering_error_raises_last_wqe_reached(nic_env):
    """As an HCA does: a QP that receives from an SRQ reports IBV_EVENT_QP_LAST_WQE_REACHED (16)
    once it is in the error state (UCX waits for it before destroying such QPs)."""
    p = subprocess.run([sys.executable, "-c", LAST_WQE], env=nic_env, capture_output=True,
                       text=True, timeout=30)
    assert p.stdout.splitlines() == ["modify 0", "get 0 type 16 is_qp True"], p.stdout + p.stderr
