"""Memory keys are index << 8 | an 8-bit tag that changes on reuse, as mlx5 mkeys.  No key may be
MLX5_INVALID_LKEY (0x100): in a receive WQE that value ends the scatter list, so a receive
posted with it would be read as empty and the SEND into it fail with a local length error
(seen as a rare ibv_rc_pingpong failure: the first MR of a process, index 1, drew tag 0)."""
import json
import sys

from .conftest import run

MLX5_INVALID_LKEY = 0x100

# registers and deregisters one MR again and again: it gets index 1 each time, with the next
# tag of the host-wide counter, so 600 rounds see every tag at least twice
REREGISTER = r"""
import ctypes, json
v = ctypes.CDLL("libibverbs.so.1")
v.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
v.ibv_open_device.restype = ctypes.c_void_p
v.ibv_open_device.argtypes = [ctypes.c_void_p]
v.ibv_alloc_pd.restype = ctypes.c_void_p
v.ibv_alloc_pd.argtypes = [ctypes.c_void_p]
v.ibv_reg_mr.restype = ctypes.c_void_p
v.ibv_reg_mr.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
v.ibv_dereg_mr.argtypes = [ctypes.c_void_p]

class MR(ctypes.Structure):       # struct ibv_mr
    _fields_ = [("context", ctypes.c_void_p), ("pd", ctypes.c_void_p), ("addr", ctypes.c_void_p),
                ("length", ctypes.c_size_t), ("handle", ctypes.c_uint32),
                ("lkey", ctypes.c_uint32), ("rkey", ctypes.c_uint32)]

n = ctypes.c_int()
devs = v.ibv_get_device_list(ctypes.byref(n))
ctx = v.ibv_open_device(devs[0])
pd = v.ibv_alloc_pd(ctx)
buf = ctypes.create_string_buffer(4096)
keys = []
for _ in range(600):
    mr = v.ibv_reg_mr(pd, buf, 4096, 1)       # IBV_ACCESS_LOCAL_WRITE
    m = ctypes.cast(mr, ctypes.POINTER(MR)).contents
    keys.append([m.lkey, m.rkey])
    assert v.ibv_dereg_mr(mr) == 0
print(json.dumps(keys))
"""


def test_no_memory_key_is_the_invalid_lkey(nic_env):
    res = run([sys.executable, "-c", REREGISTER], nic_env, timeout=60, check=True)
    keys = json.loads(res.out)
    assert len(keys) == 600
    assert all(lkey == rkey for lkey, rkey in keys)
    assert {lkey >> 8 for lkey, _ in keys} == {1}          # the freed index is reused
    assert len({lkey & 0xFF for lkey, _ in keys}) >= 255    # the tag went all the way round
    assert [k for k, _ in keys if k == MLX5_INVALID_LKEY] == []
