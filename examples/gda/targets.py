# The GPU-initiated example (see README.md).  Two builds of one program: CUDA kernels where nvcc is
# present, and CPU threads standing in for the GPU everywhere (CI, `sigmatrace demo`).
_common = ["examples/gda/gda_host.c"]
TARGETS = [
    Target(out="bin/gda_example_cpu", kind="exe",
           sources=_common + ["examples/gda/gda_cpu.c"],
           libs=["ibverbs", "mlx5", "dl", "pthread"]),
    Target(out="bin/gda_example", kind="exe", cuda=True,
           sources=_common + ["examples/gda/gda_kernels.cu"],
           cflags=["-Xcompiler", "-D_GNU_SOURCE"],
           libs=["ibverbs", "mlx5", "dl"]),
]
