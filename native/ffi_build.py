"""cffi build of sigmatrace._native: the small C helpers the Python side calls directly."""

from cffi import FFI

ffibuilder = FFI()
ffibuilder.cdef(
    """
    uint64_t st_py_rdtsc(void);
    void st_py_clock_triple(uint64_t out[3]);
    """
)
ffibuilder.set_source(
    "sigmatrace._native",
    '#include <stdint.h>\nuint64_t st_py_rdtsc(void);\nvoid st_py_clock_triple(uint64_t out[3]);\n',
    sources=["native/pyext/clock.c"],
    include_dirs=["native/include"],
    extra_compile_args=["-O2", "-std=gnu11"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
