# The emulated ConnectX NIC: rdma-core's two libraries, built from native/simnic/.
# libibverbs.so.1 is the generic verbs layer; libmlx5.so.1 is the mlx5 provider, the NIC
# engine and mlx5dv.  Programs run on them with LD_LIBRARY_PATH=<_lib>/simnic (see
# sigmatrace.simnic.environment).  As installed by rdma-core (Debian 12's 44.0), each file has
# its full version and the SONAME is a link to it (a traced process's module list names the
# file: the agent must find the library either way); the unversioned names are for programs
# that dlopen "libibverbs.so" / "libmlx5.so" as NCCL does.
_CFLAGS = ["-fvisibility=hidden", "-pthread", "-fno-strict-aliasing"]

TARGETS = [
    Target(
        out="simnic/libibverbs.so.1.14.44.0",
        sources=["native/simnic/verbs_lib.c"],
        cflags=_CFLAGS,
        ldflags=["-pthread"],
        libs=["dl"],
        version_script="native/simnic/libibverbs.map",
        soname="libibverbs.so.1",
        links=["libibverbs.so.1", "libibverbs.so"],
    ),
    Target(
        out="simnic/libmlx5.so.1.24.44.0",
        sources=["native/simnic/mlx5_*.c", "native/simnic/eng_*.c"],
        cflags=_CFLAGS,
        ldflags=["-pthread"],
        libs=["dl"],
        version_script="native/simnic/libmlx5.map",
        soname="libmlx5.so.1",
        links=["libmlx5.so.1", "libmlx5.so"],
    ),
    # librdmacm.so.1: rdma_cm between processes on the emulated fabric (rdmacm_int.h).
    Target(
        out="simnic/librdmacm.so.1.3.44.0",
        sources=["native/simnic/rdmacm_*.c"],
        cflags=_CFLAGS,
        ldflags=["-pthread"],
        libs=["ibverbs"],
        version_script="native/simnic/librdmacm.map",
        soname="librdmacm.so.1",
        links=["librdmacm.so.1", "librdmacm.so"],
    ),
    # libefa.so.1: stands in for rdma-core's EFA library, which libfabric links; the emulated
    # NIC has no EFA device (efa_standin.c).
    Target(
        out="simnic/libefa.so.1.2.44.0",
        sources=["native/simnic/efa_standin.c"],
        cflags=_CFLAGS,
        version_script="native/simnic/libefa.map",
        soname="libefa.so.1",
        links=["libefa.so.1"],
    ),
]

# The benchmark's baseline (bench/simnic_bench.py): the same hand-off over a plain
# shared-memory ring between two processes.
TARGETS.append(
    Target(out="bin/simnic_shm_baseline", sources=["bench/simnic/shm_baseline.c"], kind="exe",
           cflags=["-O2"]),
)
# The CPU an idle engine thread costs, with and without direct queues (bench/simnic_bench.py).
TARGETS.append(
    Target(out="bin/simnic_engine_idle", sources=["bench/simnic/engine_idle.c"], kind="exe",
           cflags=["-O2"], libs=["ibverbs", "mlx5"]),
)
# libsimnic_cudaio.so: the CUDA I/O-memory bridge, an rtld audit module (LD_AUDIT) that has the
# driver map an emulated UAR for the GPU when a program asks for I/O memory, as hardware does
# (cuda_io_uar.c; sigmatrace.simnic.environment(cuda_io_uar=...)).
TARGETS.append(
    Target(out="simnic/libsimnic_cudaio.so", sources=["native/simnic/cuda_io_uar.c"],
           # its wrappers are what dlsym gives for the driver's exports, so tools hook them as
           # exports (the tracer does): each keeps a body of its own, no tail jump into a
           # function they share, which an interceptor would follow
           cflags=["-fvisibility=hidden", "-fno-optimize-sibling-calls"]),
)
