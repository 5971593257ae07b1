"""Debian's libfabric 1.17 tools (libfabric-bin), unmodified, on the emulated NIC: fi_info lists
the verbs provider's endpoints on mlx5_0, and fi_pingpong's msg and rdm endpoints (connected
through the emulated librdmacm) and dgram endpoints (UD QPs) pass their own data checks between two processes."""
import re

import pytest

from .conftest import free_port, run, run_pair, tcp_listening


def _pingpong(env, ep_type: str, size: int, iters: int):
    """fi_pingpong exchanges addresses over its own TCP socket (PORT on 127.0.0.1): the client
    starts once the server listens there."""
    port = free_port()
    args = ["fi_pingpong", "-p", "verbs", "-e", ep_type, "-S", str(size), "-I", str(iters), "-c"]
    return run_pair(args + ["-B", str(port)], args + ["-P", str(port), "127.0.0.1"], env, timeout=60,
                    ready=lambda: tcp_listening(port), retry_on=None)


def _entries(out: str):
    """fi_info's entries as (provider, domain, type, protocol)."""
    return re.findall(r"provider: (\S+)\n\s+fabric: .*\n\s+domain: (\S+)\n\s+version: .*\n"
                      r"\s+type: (\S+)\n\s+protocol: (\S+)", out)


def test_fi_info_lists_msg_rdm_and_dgram(nic_env):
    r = run(["fi_info", "-p", "verbs"], nic_env, timeout=30)
    assert r.rc == 0, r.out + r.err
    entries = _entries(r.out)
    assert ("verbs", "mlx5_0", "FI_EP_MSG", "FI_PROTO_RDMA_CM_IB_RC") in entries, r.out
    assert ("verbs;ofi_rxm", "mlx5_0", "FI_EP_RDM", "FI_PROTO_RXM") in entries, r.out
    assert entries.count(("verbs", "mlx5_0", "FI_EP_MSG", "FI_PROTO_RDMA_CM_IB_RC")) == 1
    # every entry is the emulated device's, its fabric named by the port's GID subnet prefix
    assert ("verbs", "mlx5_0-dgram", "FI_EP_DGRAM", "FI_PROTO_IB_UD") in entries, r.out
    assert {e[1] for e in entries} == {"mlx5_0", "mlx5_0-dgram"}
    assert set(re.findall(r"fabric: (\S+)", r.out)) == {"IB-0xfe80000000000000"}


@pytest.mark.parametrize("ep_type", ["msg", pytest.param("rdm", marks=pytest.mark.xfail(
    strict=False, reason="known race (docs/simnic.md, Known races), 1 run in 3 to 10 under load: "
    "after all 50 exchanges verified, the side that finishes second sees its peer's close before "
    "it has read its last completion, and rxm cancels that send ('Work Request Flushed Error')")),
    "dgram"])
def test_fi_pingpong(ep_type, nic_env):
    srv, cli = _pingpong(nic_env, ep_type, 4096, 50)
    for res in (srv, cli):
        assert res.rc == 0, res.out + res.err
        # -c: fi_pingpong checks every received buffer and fails on a mismatch.  The row:
        # size, sent, =acked, total bytes both ways (4096 * 50 * 2 = 400k)
        assert re.search(r"^4k\s+50\s+=50\s+400k\s", res.out, re.M), res.out + res.err
