"""The emulated libraries export what Debian's rdma-core 44 exports: every name under every
version (default and compat), and bind through dlsym and dlvsym as NCCL resolves them."""
import subprocess
import sys

import pytest

from sigmatrace import paths

SYSTEM = "/usr/lib/x86_64-linux-gnu"


def _exports(path):
    out = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=True).stdout
    rows = set()
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[1] == "g" and "*UND*" not in line:
            rows.add((f[-2], f[-1]))		# (version, name); "(V)" marks a non-default version
    return rows


@pytest.mark.parametrize("lib", ["libibverbs.so.1", "libmlx5.so.1"])
def test_export_table_matches_rdma_core_44(lib):
    ours = _exports(paths.native(f"simnic/{lib}"))
    theirs = _exports(f"{SYSTEM}/{lib}")
    assert theirs, "Debian's rdma-core is installed by scripts/setup.sh"
    assert ours == theirs, f"missing {sorted(theirs - ours)}, extra {sorted(ours - theirs)}"


def test_sonames_and_dev_links():
    d = paths.native("simnic/libibverbs.so.1").parent
    for lib in ("libibverbs", "libmlx5"):
        out = subprocess.run(["readelf", "-d", str(d / f"{lib}.so.1")], capture_output=True, text=True).stdout
        assert f"Library soname: [{lib}.so.1]" in out
        assert (d / f"{lib}.so").resolve() == (d / f"{lib}.so.1").resolve()


RESOLVE = r"""
import ctypes, sys
libc = ctypes.CDLL(None)
libc.dlvsym.restype = ctypes.c_void_p
libc.dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
d = sys.argv[1]
vb = ctypes.CDLL(d + "/libibverbs.so")		# NCCL opens the development name, RTLD_LOCAL
m5 = ctypes.CDLL(d + "/libmlx5.so")
for lib, name, ver in [(vb, "ibv_get_device_list", "IBVERBS_1.1"), (vb, "ibv_get_device_list", "IBVERBS_1.0"),
                       (vb, "ibv_reg_mr_iova2", "IBVERBS_1.8"), (vb, "ibv_reg_dmabuf_mr", "IBVERBS_1.12"),
                       (vb, "ibv_query_ece", "IBVERBS_1.10"), (vb, "ibv_qp_to_qp_ex", "IBVERBS_1.6"),
                       (m5, "mlx5dv_devx_obj_create", "MLX5_1.7"), (m5, "mlx5dv_devx_umem_reg_ex", "MLX5_1.19"),
                       (m5, "mlx5dv_init_obj", "MLX5_1.2"), (m5, "mlx5dv_init_obj", "MLX5_1.0"),
                       (m5, "mlx5dv_devx_alloc_uar", "MLX5_1.7")]:
    print(name, ver, bool(libc.dlvsym(lib._handle, name.encode(), ver.encode())))
print("unversioned", bool(vb.ibv_get_device_list))
"""


def test_dlvsym_binds_versions_as_nccl_does():
    d = str(paths.native("simnic/libibverbs.so.1").parent)
    out = subprocess.run([sys.executable, "-c", RESOLVE, d], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 12 and all(line.endswith("True") for line in lines), out.stdout


STRINGS = r"""
import ctypes, sys
l = ctypes.CDLL(sys.argv[1])
for fn, rng in [("ibv_wc_status_str", range(-1, 26)), ("ibv_node_type_str", range(-2, 9)),
                ("ibv_port_state_str", range(-1, 7)), ("ibv_event_type_str", range(-1, 21))]:
    f = getattr(l, fn); f.restype = ctypes.c_char_p
    for i in rng: print(fn, i, f(i).decode())
for fn in ("ibv_rate_to_mult", "ibv_rate_to_mbps"):
    for i in range(0, 26): print(fn, i, getattr(l, fn)(i))
for m in (0, 1, 2, 4, 8, 11, 12, 16, 20, 24, 32, 48, 160, 240, 320, 480, 7, 40):
    print("mult_to_ibv_rate", m, l.mult_to_ibv_rate(m))
for b in (2500, 5000, 10000, 14062, 25781, 28125, 53125, 103125, 206250, 425000, 1275000, 200000, 1):
    print("mbps_to_ibv_rate", b, l.mbps_to_ibv_rate(b))
"""


def test_strings_and_rates_are_rdma_cores():
    ours = subprocess.run([sys.executable, "-c", STRINGS, str(paths.native("simnic/libibverbs.so.1"))],
                          capture_output=True, text=True, timeout=60)
    theirs = subprocess.run([sys.executable, "-c", STRINGS, f"{SYSTEM}/libibverbs.so.1"],
                            capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0 and theirs.returncode == 0, ours.stderr + theirs.stderr
    assert ours.stdout.splitlines() == theirs.stdout.splitlines()
