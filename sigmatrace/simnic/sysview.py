"""The emulated HCAs in /sys and /dev, for one program and its children only.

Stacks built for real hardware find an RDMA device in the file system before they open it:
UCX requires /dev/infiniband/uverbsN to be a character device it may read and write, resolves
/sys/class/infiniband/<dev> to the PCI function above it and reads the PCI vendor and device
ids there (its mlx5 transports are offered only for ConnectX ids), the NUMA node and the local
CPUs; NCCL and NVSHMEM walk the same path.  `sigmatrace simnic run` gives the program a private
mount namespace in which overlays over /dev, /sys/class and /sys/devices add those entries; the
rest of the machine sees nothing of it.  That needs root (CAP_SYS_ADMIN) and overlayfs.

Run as `python -m sigmatrace.simnic.sysview --devices N -- PROGRAM ARGS...`: it prepares the
view in a new mount namespace, then execs PROGRAM.

What the files say matches what the emulated libibverbs answers through ibv_read_sysfs_file
(native/simnic/mlx5_dev.c).  Values that belong to one process's instance of a device (node
GUID, LID, GIDs: each process is its own HCA on the fabric) are not written: a shared file
cannot hold them.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
from pathlib import Path

PCI_VENDOR = 0x15B3             # Mellanox
PCI_DEVICE = 0x1021             # 4129: ConnectX-7
FW_VER = "28.39.1002"
BOARD_ID = "MT_0000000838"
UVERBS_MAJOR, UVERBS_MINOR0 = 231, 192
FIRST_BUS = 0x3B                # buses are picked from here on, skipping the machine's own
# The emulated NIC registers GPU memory with plain ibv_reg_mr, which is what NVIDIA's peer-memory
# module gives a real NIC; stacks that check for the module before they register GPU memory
# (NVSHMEM's IB transports) find it here.
PEERMEM_VERSION = "sys/module/nvidia_peermem/version"

_CLONE_NEWNS = 0x00020000
_MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 0x1000, 0x2000, 0x4000, 1 << 18
_MNT_DETACH = 2


class ViewError(Exception):
    """The view cannot be provided here (one line saying why)."""


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise ViewError(f"{what}: {os.strerror(err)}")


def requirement() -> str | None:
    """None when the view can be made here, else what is missing (one line)."""
    if os.geteuid() != 0:
        return "needs root (CAP_SYS_ADMIN) for a private mount namespace"
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        filesystems = ""
    if "overlay" not in filesystems:
        return "the kernel has no overlay file system"
    return None


def pci_addresses(devices: int, taken: set[str] | None = None) -> list[str]:
    """PCI addresses for the HCAs: one bus each, none the machine's own."""
    if taken is None:
        try:
            taken = set(os.listdir("/sys/bus/pci/devices"))
        except OSError:
            taken = set()
    used_buses = {a.split(":")[1] for a in taken if a.count(":") == 2}
    out, bus = [], FIRST_BUS
    while len(out) < devices and bus <= 0xFF:
        if f"{bus:02x}" not in used_buses:
            out.append(f"0000:{bus:02x}:00.0")
        bus += 1
    return out


def _cpu_mask(ncpus: int) -> str:
    """All CPUs as the kernel prints a cpumask: 32-bit hex words, most significant first."""
    mask = (1 << ncpus) - 1
    words = [(mask >> (32 * i)) & 0xFFFFFFFF for i in range((ncpus + 31) // 32)]
    return ",".join(f"{w:08x}" for w in reversed(words))


def _numa_node() -> int:
    return 0 if Path("/sys/devices/system/node/node0").is_dir() else -1


def device_tree(devices: int, addresses: list[str] | None = None, ncpus: int | None = None,
                numa_node: int | None = None) -> dict[str, str | tuple[str, str]]:
    """The entries to add, relative to / : a file's text, or ("link", target)."""
    addresses = addresses if addresses is not None else pci_addresses(devices)
    ncpus = ncpus or os.cpu_count() or 1
    numa = _numa_node() if numa_node is None else numa_node
    tree: dict[str, str | tuple[str, str]] = {"sys/class/infiniband_verbs/abi_version": "6\n"}
    if devices:
        tree[PEERMEM_VERSION] = "1.0\n"
    for i, bdf in enumerate(addresses[:devices]):
        root = bdf.rsplit(":", 2)[0] + ":" + bdf.split(":")[1]      # 0000:3b
        fn = f"sys/devices/pci{root}/{bdf}"
        ib, uv = f"mlx5_{i}", f"uverbs{i}"
        tree.update({
            f"{fn}/vendor": f"0x{PCI_VENDOR:04x}\n",
            f"{fn}/device": f"0x{PCI_DEVICE:04x}\n",
            f"{fn}/subsystem_vendor": f"0x{PCI_VENDOR:04x}\n",
            f"{fn}/subsystem_device": "0x0041\n",
            f"{fn}/class": "0x020700\n",            # network controller, InfiniBand
            f"{fn}/revision": "0x00\n",
            f"{fn}/numa_node": f"{numa}\n",
            f"{fn}/local_cpus": _cpu_mask(ncpus) + "\n",
            f"{fn}/local_cpulist": (f"0-{ncpus - 1}" if ncpus > 1 else "0") + "\n",
            f"{fn}/current_link_speed": "32.0 GT/s PCIe\n",
            f"{fn}/current_link_width": "16\n",
            f"{fn}/max_link_speed": "32.0 GT/s PCIe\n",
            f"{fn}/max_link_width": "16\n",
            f"{fn}/infiniband/{ib}/node_type": "1: CA\n",
            f"{fn}/infiniband/{ib}/fw_ver": FW_VER + "\n",
            f"{fn}/infiniband/{ib}/board_id": BOARD_ID + "\n",
            f"{fn}/infiniband/{ib}/hca_type": f"MT{PCI_DEVICE}\n",
            f"{fn}/infiniband/{ib}/hw_rev": "0x0\n",
            f"{fn}/infiniband/{ib}/node_desc": f"simnic {ib}\n",
            f"{fn}/infiniband/{ib}/device": ("link", "../../../" + bdf),
            f"{fn}/infiniband/{ib}/ports/1/state": "4: ACTIVE\n",
            f"{fn}/infiniband/{ib}/ports/1/phys_state": "5: LinkUp\n",
            f"{fn}/infiniband/{ib}/ports/1/link_layer": "InfiniBand\n",
            f"{fn}/infiniband/{ib}/ports/1/rate": "400 Gb/sec (4X NDR)\n",
            f"{fn}/infiniband/{ib}/ports/1/sm_lid": "0x1\n",
            f"{fn}/infiniband/{ib}/ports/1/sm_sl": "0\n",
            f"{fn}/infiniband/{ib}/ports/1/lid_mask_count": "0\n",
            f"{fn}/infiniband/{ib}/ports/1/gid_attrs/types/0": "IB/RoCE v1\n",
            f"{fn}/infiniband_verbs/{uv}/ibdev": ib + "\n",
            f"{fn}/infiniband_verbs/{uv}/abi_version": "1\n",
            f"{fn}/infiniband_verbs/{uv}/dev": f"{UVERBS_MAJOR}:{UVERBS_MINOR0 + i}\n",
            f"{fn}/infiniband_verbs/{uv}/device": ("link", "../../../" + bdf),
            f"sys/class/infiniband/{ib}": ("link", f"../../devices/pci{root}/{bdf}/infiniband/{ib}"),
            f"sys/class/infiniband_verbs/{uv}": (
                "link", f"../../devices/pci{root}/{bdf}/infiniband_verbs/{uv}"),
        })
    return tree


def _submounts(top: str) -> list[str]:
    """Mount points directly below TOP (the outermost ones), from /proc/self/mountinfo."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(top + "/"):
            points.append(point)
    outer = sorted({p for p in points if not any(p.startswith(q + "/") for q in points)})
    return outer


def _write_tree(staged: dict[str, Path], tree: dict, devices: int) -> None:
    for rel, what in tree.items():
        top = next((t for t in staged if ("/" + rel).startswith(t + "/")), None)
        if top is None:         # a folder this machine lacks (no /sys/module): left out
            continue
        path = staged[top] / ("/" + rel)[len(top) + 1:]
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, tuple):
            os.symlink(what[1], path)
        else:
            path.write_text(what)
    ib = staged["/dev"] / "infiniband"
    ib.mkdir(exist_ok=True)
    for i in range(devices):
        node = ib / f"uverbs{i}"
        os.mknod(node, 0o20666, os.makedev(UVERBS_MAJOR, UVERBS_MINOR0 + i))
        os.chmod(node, 0o666)


def enter(devices: int) -> None:
    """Moves this process into a new mount namespace holding the view of DEVICES HCAs."""
    missing = requirement()
    if missing:
        raise ViewError(missing)
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "making / private")
    stage = Path(tempfile.mkdtemp(prefix="simnic-view."))
    try:
        _check(libc.mount(b"simnic-view", str(stage).encode(), b"tmpfs", 0, b"mode=0755"),
               "tmpfs for the view")
        tops = ["/dev", "/sys/class", "/sys/devices"] + (["/sys/module"] if os.path.isdir("/sys/module") else [])
        merged: dict[str, Path] = {}
        for n, top in enumerate(tops):
            up, work, m = stage / f"u{n}", stage / f"w{n}", stage / f"m{n}"
            for d in (up, work, m):
                d.mkdir()
            opts = f"lowerdir={top},upperdir={up},workdir={work}".encode()
            _check(libc.mount(b"overlay", str(m).encode(), b"overlay", 0, opts), f"overlay on {top}")
            for sub in _submounts(top):     # /dev/shm (the fabric), /dev/pts, ...
                target = m / sub[len(top) + 1:]
                _check(libc.mount(sub.encode(), str(target).encode(), None, _MS_BIND | _MS_REC, None),
                       f"bind {sub}")
            merged[top] = m
        _write_tree(merged, device_tree(devices), devices)
        for top, m in merged.items():
            _check(libc.mount(str(m).encode(), top.encode(), None, _MS_MOVE, None), f"moving onto {top}")
        libc.umount2(str(stage).encode(), _MNT_DETACH)
    finally:
        try:
            stage.rmdir()
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    devices = 1
    if args[:1] == ["--devices"]:
        devices = int(args[1])
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m sigmatrace.simnic.sysview [--devices N] -- PROGRAM [ARGS...]",
              file=sys.stderr)
        return 2
    try:
        enter(devices)
    except (ViewError, OSError) as e:
        print(f"simnic: no /sys view for the emulated NIC ({e}); running without it",
              file=sys.stderr)
    prog = shutil.which(args[0]) or args[0]
    try:
        os.execv(prog, args)
    except OSError as e:
        print(f"simnic: {args[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
