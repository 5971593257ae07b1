/* layer_call.h: the CALL / CALL_END records of the provider layers above verbs (UCP, UCT,
 * libfabric; native/include/sigmatrace/layers.h names them and FORMAT.md the fields).
 *
 * A hook on such a function does:
 *     struct layer_call c;
 *     layer_call_begin(&c, ST_LAYER_UCT, ST_UCT_put_short, qpn, len, rkey, raddr, (uint64_t)ep);
 *     ret = original(...);
 *     layer_call_end(&c, ret, ret < 0, qpn, 0, 0);
 * Both are a few stores when recording, a load and a branch when not.  Every mode counts the
 * call in the thread's live slot (calls[ST_CALL_UCP + layer - 1]); simple and full mode write the
 * two records.  A call made while another of the same thread is open is flagged NESTED: the
 * records in between are its children, which is how a UCP call is linked to its UCT calls and a
 * libfabric call to the verbs work requests it posted.
 */
#ifndef SIGMATRACE_LAYER_CALL_H
#define SIGMATRACE_LAYER_CALL_H

#include <sigmatrace/layers.h>

#include "rt.h"

#define LAYER_INLINE inline __attribute__((always_inline))

struct layer_call {
    struct st_thread *t; /* NULL when not recording at the call's entry */
    uint32_t number;     /* 0 when no CALL record was written */
    uint8_t layer, fn;
};

static LAYER_INLINE void layer_call_begin(struct layer_call *c, uint8_t layer, uint8_t fn, uint32_t qpn,
                                          uint32_t len, uint32_t key, uint64_t addr, uint64_t ep)
{
    c->layer = layer;
    c->fn = fn;
    c->number = 0;
    c->t = NULL;
    if (ST_UNLIKELY(!st_recording()))
        return;
    struct st_thread *t = st_self();
    if (ST_UNLIKELY(!t))
        return;
    c->t = t;
    t->live->calls[ST_CALL_UCP + layer - 1]++;
    if (st_g.mode == ST_MODE_AGGREGATE)
        return;
    uint32_t n = t->call_number + 1;
    if (ST_UNLIKELY(n == 0))
        n = 1;
    t->call_number = n;
    uint8_t flags = t->call_depth ? ST_F_NESTED : 0;
    t->call_depth++;
    c->number = n;
    struct st_record *r = st_rec_reserve(t);
    if (ST_UNLIKELY(!r))
        return; /* dropped (counted); CALL_END is still written, so the depth stays right */
    r->ts = st_now();
    st_rec_word1(r, ST_REC_CALL, flags, fn, layer, qpn);
    r->len = len;
    r->key = key;
    r->addr = addr;
    r->extra = ep;
    r->aux32 = n;
    st_rec_commit(t, r);
}

/* `ret` as the function returned it (stored as a signed 32-bit value); `err` whether that is an
 * error; `addr` the libfabric destination fi_addr_t (0 elsewhere); `extra` ST_CALL_WQE_RANGE(...)
 * when the call's send queue is known, else 0. */
static LAYER_INLINE void layer_call_end(struct layer_call *c, int64_t ret, int err, uint32_t qpn, uint64_t addr,
                                        uint64_t extra)
{
    struct st_thread *t = c->t;
    if (!c->number || ST_UNLIKELY(!t || t->gen != st_g.gen))
        return; /* not recorded at entry, or the session ended during the call */
    if (t->call_depth)
        t->call_depth--;
    struct st_record *r = st_rec_reserve(t);
    if (ST_UNLIKELY(!r))
        return;
    r->ts = st_now();
    st_rec_word1(r, ST_REC_CALL_END, err ? ST_F_ERR : 0, c->fn, c->layer, qpn);
    r->len = 0;
    r->key = (uint32_t)(int32_t)ret;
    r->addr = addr;
    r->extra = extra;
    r->aux32 = c->number;
    st_rec_commit(t, r);
}

#endif
