"""The column-wise protobuf encoder writes what the generated classes parse."""
import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from sigmatrace.export import protoenc as pe

EDGE = np.array([0, 1, 127, 128, 16383, 16384, 2**32 - 1, 2**35, 2**63, 2**64 - 1], dtype=np.uint64)


def _parse(data: bytes) -> list:
    t = pb.Trace()
    t.ParseFromString(data)
    return list(t.packet)


def test_varints_of_every_width_and_optional_fields():
    n = len(EDGE)
    rng = np.random.default_rng(3)
    flows = rng.integers(0, 2**63, n, dtype=np.uint64)
    has_flow = np.arange(n) % 3 == 0
    has_arg = np.arange(n) % 2 == 1
    ann = pe.Msg([pe.Bytes(b"\x08\x07"), pe.Varint(3, EDGE[::-1])], n)
    ev = pe.Msg([pe.Bytes(b"\x48\x03"), pe.Varint(11, EDGE), pe.Varint(10, 5), pe.Nested(4, ann, has_arg),
                 pe.Fixed64(47, flows, has_flow), pe.Fixed64(47, flows + np.uint64(1), has_flow),
                 pe.Fixed64(44, np.linspace(-1.5, 2.5, n))], n)
    pkt = pe.Msg([pe.Varint(8, EDGE), pe.Bytes(b"\x50\x01"), pe.Nested(11, ev)], n)
    packets = _parse(pe.encode_repeated(1, pkt))
    assert len(packets) == n
    got = sorted(packets, key=lambda p: p.timestamp)
    for i, p in enumerate(got):
        j = int(np.flatnonzero(EDGE == p.timestamp)[0])
        te = p.track_event
        assert p.trusted_packet_sequence_id == 1
        assert te.type == te.TYPE_INSTANT and te.track_uuid == EDGE[j] and te.name_iid == 5
        assert te.double_counter_value == np.linspace(-1.5, 2.5, n)[j]
        if has_flow[j]:
            assert list(te.flow_ids) == [int(flows[j]), int(flows[j]) + 1]
        else:
            assert len(te.flow_ids) == 0
        if has_arg[j]:
            [a] = te.debug_annotations
            assert a.name_iid == 7 and a.uint_value == EDGE[::-1][j]
        else:
            assert len(te.debug_annotations) == 0


def test_padded_varints_parse_to_their_value():
    # within a group, small values take the width of the largest: still the same numbers
    vals = np.array([1, 2**40, 3], dtype=np.uint64)
    data = pe.encode_repeated(1, pe.Msg([pe.Varint(8, vals)], 3))
    assert len(data) == 3 * (2 + 1 + 6)
    assert [p.timestamp for p in _parse(data)] == [1, 2**40, 3]


def test_empty():
    assert pe.encode_repeated(1, pe.Msg([pe.Varint(8, np.zeros(0, np.uint64))], 0)) == b""
