# The libcxi-shaped example (docs/cxi.md): a program and two libraries whose command-queue
# emit and ring functions are static inline, built -O2 -g (COMMON_CFLAGS) with build ids.
_INC = ["-Iexamples/cxi"]
_BUILD_ID = ["-Wl,--build-id=sha1"]

TARGETS = [
    Target(out="cxi/libcxidemo_ops.so", sources=["examples/cxi/cxidemo_ops.c"],
           cflags=_INC, ldflags=_BUILD_ID, soname="libcxidemo_ops.so"),
    Target(out="cxi/libcxidemo_plugin.so", sources=["examples/cxi/cxidemo_plugin.c"],
           cflags=_INC, ldflags=_BUILD_ID, soname="libcxidemo_plugin.so"),
    Target(out="bin/cxi_demo", kind="exe",
           sources=["examples/cxi/cxi_demo.c", "examples/cxi/cxi_sim.c"],
           cflags=_INC, ldflags=_BUILD_ID + ["-L{out}/cxi", "-Wl,-rpath,$ORIGIN/../cxi"],
           libs=["cxidemo_ops", "pthread", "dl"]),
    # the same program without debug information (for the "no DWARF" path)
    Target(out="bin/cxi_demo_nodebug", kind="exe",
           sources=["examples/cxi/cxi_demo.c", "examples/cxi/cxi_sim.c"],
           cflags=_INC + ["-g0"], ldflags=_BUILD_ID + ["-L{out}/cxi", "-Wl,-rpath,$ORIGIN/../cxi"],
           libs=["cxidemo_ops", "pthread", "dl"]),
    Target(out="bin/cxi_bench", kind="exe", sources=["examples/cxi/cxi_bench.c"],
           cflags=_INC, ldflags=_BUILD_ID),
]
