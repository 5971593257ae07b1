# The in-process runtime (libsigmatrace_rt.so).  Every .c file in native/runtime/ is part of it:
# other parts (doorbell repeaters, WQE recovery, CUDA/devx wrappers) add their files here.
TARGETS = [
    Target(
        out="libsigmatrace_rt.so",
        sources=["native/runtime/*.c"],
        cflags=["-fvisibility=hidden", "-pthread", "-fno-omit-frame-pointer"],
        libs=["pthread"],
        soname="libsigmatrace_rt.so",
    ),
]

# Preloaded by `sigmatrace spawn` into the target and its exec'd descendants (see follow.c).
TARGETS.append(
    Target(
        out="libsigmatrace_follow.so",
        sources=["native/runtime/follow/follow.c"],
        cflags=["-fvisibility=hidden"],
        soname="libsigmatrace_follow.so",
    )
)
