"""Send-queue limits as rdma-core's mlx5 provider computes them on a ConnectX: a send WQE is at
most the device's max_wqe_sz_sq (1024 bytes); RC and UC reserve 192 bytes before the data
(control segment and room for a memory-window bind), UD 64 (control and datagram segments);
max_inline_data is what the WQE, in 64-byte blocks, leaves after that and the 4-byte inline
header.  libfabric's verbs provider finds the largest inline size by creating QPs and then
asks for it with more WRs and gather entries (4): that request must succeed."""
from .conftest import run
from .test_ex_verbs import build

EXPECTED = []
for qp_type, largest, small, wr16, wr384_512, sge30 in (
        ("RC", 828, 60, (124, 25), (572, 682), 508),
        ("UC", 828, 60, (124, 25), (572, 682), 508),
        ("UD", 956, 60, (124, 21), (572, 409), 508)):
    EXPECTED += [
        f"{qp_type} largest inline: {largest}",
        f"{qp_type} wr 1 sge 1 inline 0: max_inline_data {small} max_send_wr 1",
        f"{qp_type} wr 16 sge 1 inline 64: max_inline_data {wr16[0]} max_send_wr {wr16[1]}",
        f"{qp_type} wr 384 sge 4 inline 512: max_inline_data {wr384_512[0]} max_send_wr {wr384_512[1]}",
        f"{qp_type} wr 384 sge 4 inline {largest}: max_inline_data {largest} max_send_wr 512",
        f"{qp_type} wr 1 sge 1 inline {largest + 1}: EINVAL",
        f"{qp_type} wr 1 sge 30 inline 0: max_inline_data {sge30} max_send_wr 1",
        f"{qp_type} wr 1 sge 31 inline 0: EINVAL",
    ]


def test_send_queue_limits_are_a_connectx_s(tmp_path, nic_env):
    prog = build(tmp_path, "qp_caps", "-libverbs")
    r = run([str(prog)], nic_env, timeout=60)
    assert r.rc == 0, r.out + r.err
    assert r.out.splitlines() == EXPECTED, r.out
