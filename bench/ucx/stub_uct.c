/* A stand-in for libuct_ib.so.0 (and libucs.so.0, which the ucx provider waits for): the one
 * endpoint function the per-call benchmark calls, doing next to nothing (it counts the bytes:
 * a body long enough for a hook to be placed on its entry), so that what is timed is the hook
 * around it.  Built with -DSTUB_UCS it is the empty libucs.so.0. */
#include <stdint.h>

#ifndef STUB_UCS

uint64_t stub_bytes;

int8_t uct_rc_mlx5_ep_put_short(void *ep, const void *buffer, unsigned length, uint64_t remote_addr,
                                uint64_t rkey)
{
    stub_bytes += length;
    return length > 4096 ? -2 : 0;
}
#endif
