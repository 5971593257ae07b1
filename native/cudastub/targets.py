# The CUDA driver test double: cudastub/libcuda.so.1 (SONAME libcuda.so.1), for machines
# without a GPU.  Programs get it with LD_LIBRARY_PATH=<_lib>/cudastub (see
# sigmatrace.simnic.environment(cuda_stub=True)); it exports `sigmatrace_cudastub`.
TARGETS = [
    Target(
        out="cudastub/libcuda.so.1",
        sources=["native/cudastub/cudastub.c"],
        # distinct entry points with room for a hook's jump each, as the real driver's have
        cflags=["-fvisibility=hidden", "-pthread", "-fno-ipa-icf", "-falign-functions=64"],
        ldflags=["-pthread"],
        soname="libcuda.so.1",
        links=["libcuda.so"],
    ),
]
