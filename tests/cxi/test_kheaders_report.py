"""The merged kernel-header tree bcc needs, and the report section on damaged input."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sigmatrace.cxi import kheaders
from sigmatrace.report.cxi import op_name, section
from sigmatrace.trace import format as fmt
from sigmatrace.trace.reader import TraceDir
from sigmatrace.trace.writer import StreamWriter, make_dir, write_json


def test_merged_header_tree_private_and_idempotent(tmp_path, monkeypatch):
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    monkeypatch.setattr(kheaders, "Path", _NoModulesPath)
    root = tmp_path / "cache" / "kernel-headers"
    src = kheaders.ensure_kernel_source(cache_root=root)
    tree = Path(src)
    assert (tree / "include" / "linux" / "kconfig.h").exists()          # from -common
    assert (tree / "include" / "generated" / "autoconf.h").exists()     # from the arch package
    assert (tree / "include" / "generated" / "autoconf.h").is_symlink()
    assert root.stat().st_mode & 0o777 == 0o700 and root.parent.stat().st_mode & 0o777 == 0o700
    assert os.environ["BCC_KERNEL_SOURCE"] == src
    stamp = (tree / ".complete").stat().st_mtime_ns
    monkeypatch.delenv("BCC_KERNEL_SOURCE")
    assert kheaders.ensure_kernel_source(cache_root=root) == src       # built once
    assert (tree / ".complete").stat().st_mtime_ns == stamp
    assert [p.name for p in root.iterdir()] == [tree.name]             # no half-built leftovers


class _NoModulesPath(type(Path())):
    """Path, except that /lib/modules/<release>/build never exists (as on these machines)."""

    def exists(self, *a, **k):
        if str(self).startswith("/lib/modules/"):
            return False
        return super().exists(*a, **k)


def test_no_headers_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    monkeypatch.setattr(kheaders, "Path", _NoModulesPath)
    with pytest.raises(kheaders.KernelHeadersError) as e:
        kheaders.ensure_kernel_source(headers_root=tmp_path, cache_root=tmp_path / "c")
    assert "linux-headers-amd64" in e.value.one_line()


def _records(ops):
    r = np.zeros(len(ops), fmt.RECORD_DTYPE)
    r["type"] = fmt.RecType.CXI_CMD
    for i, (ts, ctype, op, q, wp) in enumerate(ops):
        r[i]["ts"], r[i]["aux"], r[i]["op"], r[i]["qpn"], r[i]["aux32"] = ts, ctype, op, q, wp
    return r


def test_report_section_counts_and_damage(tmp_path):
    proc = make_dir(tmp_path / "p42" / "streams")
    write_json(tmp_path / "session.json", {"format": "sigmatrace-trace", "version": 1})
    with StreamWriter(proc / "cxi-42.bin", 42, 42, "cxi", fmt.Clock.MONOTONIC) as w:
        # two doorbells: one with two commands (same ts, queue, write pointer), one with one
        w.write(_records([(10, 1, 4, 3, 6), (10, 1, 4, 3, 6), (20, 1, 1, 3, 7)]))
    with StreamWriter(proc / "cxi-43.bin", 42, 43, "cxi", fmt.Clock.MONOTONIC) as w:
        w.write(_records([(15, 0, 1, 9, 5), (16, 2, 3, 9, 6)]))
    with open(proc / "cxi-43.bin", "ab") as f:
        f.write(b"\x01" * 20)  # a torn record
    (proc / "cxi-44.bin").write_bytes(b"garbage")
    (proc / "t42.bin").write_bytes(b"not ours")
    s = section(TraceDir(tmp_path))
    assert s["cxi_doorbells"] == 4 and s["cxi_commands"] == 5
    assert s["cxi_ops"] == {"ATOMIC": 2, "PUT": 2, "CT_3": 1}
    assert s["cxi_queues"] == {"3": 3, "9": 2}
    assert s["cxi_drops"]["damaged"] == 2


def test_op_names():
    assert op_name(1, 1) == "PUT" and op_name(1, 13) == "REDUCTION" and op_name(0, 7) == "SMALL_MSG"
    assert op_name(1, 6) == "UNKNOWN_0x06" and op_name(3, 0) == "CQ_0"
