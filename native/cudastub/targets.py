# The CUDA driver test double: cudastub/libcuda.so.1 (SONAME libcuda.so.1), for machines
# without a GPU.  Programs get it with LD_LIBRARY_PATH=<_lib>/cudastub (see
# sigmatrace.simnic.environment(cuda_stub=True)); it exports `sigmatrace_cudastub`.
TARGETS = [
    Target(
        out="cudastub/libcuda.so.1.0.0-cudastub",
        sources=["native/cudastub/cudastub.c"],
        # distinct entry points with room for a hook's jump each, as the real driver's have;
        # no export may begin with a jump to the internal entry point cuGetProcAddress hands
        # out (interceptors follow such a jump and would hook both paths at once)
        cflags=["-fvisibility=hidden", "-pthread", "-fno-ipa-icf", "-falign-functions=64",
                "-fno-optimize-sibling-calls"],
        ldflags=["-pthread"],
        soname="libcuda.so.1",
        # like the driver's libcuda.so.<version>: the SONAME is a link to the file
        links=["libcuda.so.1", "libcuda.so"],
    ),
]
