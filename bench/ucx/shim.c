/* The LD_PRELOAD baseline for the ucx hook: it interposes uct_rc_mlx5_ep_put_short and writes the
 * same two 48-byte records sigmatrace's simple mode writes around a UCT call (CALL with layer,
 * function, length, key, remote address, endpoint and call number; CALL_END with the return
 * value), into a thread-local buffer that wraps (no I/O: the cost of recording alone). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include <sigmatrace/layers.h>
#include <sigmatrace/records.h>

#define BUF 65536
static int8_t (*real_put_short)(void *, const void *, unsigned, uint64_t, uint64_t);
static __thread struct st_record *buf;
static __thread unsigned n, seq, number;

static inline uint64_t tsc(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static inline struct st_record *next(void)
{
    if (!buf)
        buf = calloc(BUF, sizeof(*buf));
    struct st_record *r = &buf[n];
    n = (n + 1) & (BUF - 1);
    return r;
}

int8_t uct_rc_mlx5_ep_put_short(void *ep, const void *buffer, unsigned length, uint64_t raddr, uint64_t rkey)
{
    if (!real_put_short)
        real_put_short = dlsym(RTLD_NEXT, "uct_rc_mlx5_ep_put_short");
    unsigned num = ++number;
    struct st_record *r = next();
    r->ts = tsc();
    r->type = ST_REC_CALL;
    r->flags = 0;
    r->op = ST_UCT_put_short;
    r->aux = ST_LAYER_UCT;
    r->qpn = 0;
    r->len = length;
    r->key = (uint32_t)rkey;
    r->addr = raddr;
    r->extra = (uint64_t)(uintptr_t)ep;
    r->aux32 = num;
    __atomic_store_n(&r->seq, ++seq, __ATOMIC_RELEASE);
    int8_t ret = real_put_short(ep, buffer, length, raddr, rkey);
    r = next();
    r->ts = tsc();
    r->type = ST_REC_CALL_END;
    r->flags = ret < 0 ? ST_F_ERR : 0;
    r->op = ST_UCT_put_short;
    r->aux = ST_LAYER_UCT;
    r->qpn = 0;
    r->len = 0;
    r->key = (uint32_t)(int32_t)ret;
    r->addr = 0;
    r->extra = 0;
    r->aux32 = num;
    __atomic_store_n(&r->seq, ++seq, __ATOMIC_RELEASE);
    return ret;
}
