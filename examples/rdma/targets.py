# RDMA example programs.  They are ordinary verbs programs linked against the system's
# rdma-core (libibverbs-dev); at run time they bind whichever libibverbs.so.1 the loader
# finds first: the emulated one under `sigmatrace simnic run`.
_CFLAGS = ["-Wno-unused-function", "-pthread"]

TARGETS = [
    Target(out="bin/rdma_ops", sources=["examples/rdma/rdma_ops.c"], kind="exe",
           cflags=_CFLAGS, libs=["ibverbs"]),
    Target(out="bin/rdma_stream", sources=["examples/rdma/rdma_stream.c"], kind="exe",
           cflags=_CFLAGS, libs=["ibverbs"]),
    Target(out="bin/devx_rc", sources=["examples/rdma/devx_rc.c"], kind="exe",
           cflags=_CFLAGS, libs=["ibverbs", "mlx5", "dl"]),
    Target(out="bin/rdma_errors", sources=["examples/rdma/rdma_errors.c"], kind="exe",
           cflags=_CFLAGS, libs=["ibverbs"]),
    Target(out="bin/ud_ops", sources=["examples/rdma/ud_ops.c"], kind="exe",
           cflags=_CFLAGS, libs=["ibverbs", "mlx5"]),
    Target(out="bin/dc_ops", sources=["examples/rdma/dc_ops.c"], kind="exe",
           cflags=_CFLAGS, libs=["ibverbs", "mlx5"]),
    Target(out="bin/write_imm", sources=["examples/rdma/write_imm.c"], kind="exe",
           cflags=_CFLAGS, libs=["ibverbs"]),
]
# rdma_cm's edge cases (tests/simnic/test_rdmacm.py), linked against the system's librdmacm-dev.
TARGETS.append(Target(out="bin/cm_edges", sources=["examples/rdma/cm_edges.c"], kind="exe",
                      cflags=_CFLAGS, libs=["rdmacm"]))
# The last message before rdma_disconnect (tests/simnic/test_rdmacm.py).
TARGETS.append(Target(out="bin/cm_last_message", sources=["examples/rdma/cm_last_message.c"],
                      kind="exe", cflags=_CFLAGS, libs=["rdmacm", "ibverbs"]))
# A send's completion on the first poll after its ACK arrived (tests/simnic/test_libfabric.py).
TARGETS.append(Target(out="bin/poll_after_ack", sources=["examples/rdma/poll_after_ack.c"],
                      kind="exe", cflags=_CFLAGS, libs=["ibverbs"]))
