# The CUDA driver test double (see cudastub.c): host memory as device memory, for machines
# without a GPU.  Programs pick it with LD_LIBRARY_PATH=<lib>/cudastub.
TARGETS = [
    Target(
        out="cudastub/libcuda.so.1",
        sources=["native/cudastub/cudastub.c"],
        # distinct entry points with room for a hook's jump each, as the real driver's have
        cflags=["-fvisibility=hidden", "-fno-ipa-icf", "-falign-functions=64"],
        libs=["pthread"],
        soname="libcuda.so.1",
        links=["libcuda.so"],
    ),
]
