"""A DCI's operations and the DCT each names (Topology.dc_peer): by number, the LID of the DCT's
port, and its access key; ambiguity and a wrong key stay unresolved."""
import numpy as np

from sigmatrace.correlate.model import RunModel

from .test_topology import _port, _proc

KEY = 0x5623CEAF


def _dct(qpn, key=KEY):
    return [{"ev": "qp_create", "ctx": 1, "qpn": qpn, "type": "DCT", "fn": "mlx5dv_create_qp", "dc_key": key}]


def test_dc_peer_by_number_lid_and_key(tmp_path):
    # the same DCT number on two nodes (numbers are per device), another on a third
    dirs = [_proc(tmp_path, "a", 1, [_port(1, None), {"ev": "qp_create", "ctx": 1, "qpn": 0x20, "type": "DCI"}]),
            _proc(tmp_path, "b", 2, [_port(2, None), *_dct(0x10)]),
            _proc(tmp_path, "c", 3, [_port(3, None), *_dct(0x10), *_dct(0x11, key=7)])]
    topo = RunModel.load(dirs).topology
    b, c, c11 = topo.index_of(1, 0x10), topo.index_of(2, 0x10), topo.index_of(2, 0x11)
    dci = topo.index_of(0, 0x20)
    assert topo.is_dci.tolist().count(True) == 1 and topo.is_dci[dci] and topo.peer[dci] == -1
    got = topo.dc_peer(np.array([0x10, 0x10, 0x10, 0x10, 0x11, 0x11, 0x12]),
                       np.array([2, 3, 0, 3, 0, 0, 3]),
                       np.array([KEY, KEY, KEY, KEY + 1, 7, KEY, KEY]))
    # LID 2 -> b, LID 3 -> c; no LID: two candidates, unresolved; c's with another key: the DCT
    # dropped it; 0x11 by number alone (one DCT has it), with its key only; 0x12: nobody
    assert got.tolist() == [b, c, -1, -1, c11, -1, -1]
