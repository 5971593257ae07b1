/* layer_call.h: the CALL / CALL_END records of the provider layers above verbs (UCP, UCT,
 * libfabric; native/include/sigmatrace/layers.h names them and FORMAT.md the fields).
 *
 * A hook on such a function does:
 *     struct layer_call c;
 *     layer_call_begin(&c, ST_LAYER_UCT, ST_UCT_put_short, qpn, len, rkey, raddr, (uint64_t)ep);
 *     ret = original(...);
 *     layer_call_end(&c, ret, ret < 0, ret == -2, qpn, 0, 0);   (idle: "no resource")
 * Both are a few stores when recording, a load and a branch when not.  Every mode counts the
 * call in the thread's live slot (calls[ST_CALL_UCP + layer - 1]); simple and full mode write the
 * two records.  A call made while another of the same thread is open is flagged NESTED: the
 * records in between are its children, which is how a UCP call is linked to its UCT calls and a
 * libfabric call to the verbs work requests it posted.
 *
 * The CALL record is written late: by st_rec_reserve when the thread writes any other record
 * while the call is open (st_layer_calls_write, outermost call first, so the order is as if it
 * had been written at entry), else by layer_call_end.  That lets a call that did nothing and
 * made no record (a send refused for lack of resources, a flush still waiting) be folded into
 * the try that succeeds: programs retry such calls in a loop, millions of times while the NIC
 * is busy, and recording each would fill the ring with nothing.
 */
#ifndef SIGMATRACE_LAYER_CALL_H
#define SIGMATRACE_LAYER_CALL_H

#include <sigmatrace/layers.h>

#include "rt.h"

#define LAYER_INLINE inline __attribute__((always_inline))

/* One call, on its caller's stack from layer_call_begin to layer_call_end.  What its CALL
 * record will hold is kept in the thread's state (st_thread.open[]), never reached through the
 * caller's stack: a call left without returning (longjmp) then costs a wrong pairing, counted,
 * not a read of a dead frame. */
struct layer_call {
    struct st_thread *t; /* NULL when not recording at the call's entry */
    uint32_t depth;      /* its index in t->open[] (calls of the thread open around it) */
    uint32_t number;     /* its CALL number when deeper than t->open[] keeps */
    uint8_t layer, fn;
    uint8_t open;        /* on the thread's stack of open calls (simple and full mode) */
};

/* Whether the tries waiting to be folded are of E's function and endpoint, with no record of
 * the thread since. */
static LAYER_INLINE int layer_retry_matches(const struct st_thread *t, const struct st_open_call *e)
{
    const struct st_call_retry *rt = &t->retry;
    return rt->count && rt->head == t->head && rt->layer == e->layer && rt->fn == e->fn && rt->ep == e->ep;
}

/* Write the CALL record of open call E now: a record of its thread is about to follow it (a
 * child), or the call returned having done something.  Tries of the same function on the same
 * endpoint that came right before it (no record of the thread in between) and did nothing are
 * folded into it: its CALL carries the first try's time, its CALL_END their count. */
static LAYER_INLINE void layer_call_write(struct st_thread *t, struct st_open_call *e)
{
    e->written = 1;
    uint64_t ts = e->ts;
    struct st_call_retry *rt = &t->retry;
    if (ST_UNLIKELY(rt->count)) {
        if (layer_retry_matches(t, e)) {
            ts = rt->ts;
            e->tries = rt->count;
        }
        rt->count = 0; /* folded here, or those of another call (counted in the live block only) */
    }
    if (ST_UNLIKELY(t->unwritten_calls))
        st_layer_calls_write(t); /* the calls open around it first: they were entered first */
    uint32_t n = t->call_number + 1;
    if (ST_UNLIKELY(n == 0))
        n = 1;
    t->call_number = n;
    e->number = n;
    struct st_record *r = st_rec_reserve(t);
    if (ST_UNLIKELY(!r))
        return; /* dropped (counted); CALL_END is still written, so the pairing stays right */
    r->ts = ts;
    st_rec_word1(r, ST_REC_CALL, e->flags, e->fn, e->layer, e->qpn);
    r->len = e->len;
    r->key = e->key;
    r->addr = e->addr;
    r->extra = e->ep;
    r->aux32 = n;
    st_rec_commit(t, r);
}

static LAYER_INLINE void layer_call_begin(struct layer_call *c, uint8_t layer, uint8_t fn, uint32_t qpn,
                                          uint32_t len, uint32_t key, uint64_t addr, uint64_t ep)
{
    c->layer = layer;
    c->fn = fn;
    c->open = 0;
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
    uint32_t d = t->call_depth;
    c->depth = d;
    c->open = 1;
    t->call_depth = d + 1;
    struct st_open_call tmp, *e = d < ST_OPEN_CALLS ? &t->open[d] : &tmp;
    e->ts = st_now();
    e->qpn = qpn;
    e->len = len;
    e->key = key;
    e->addr = addr;
    e->ep = ep;
    e->tries = 0;
    e->number = 0;
    e->written = 0;
    e->layer = layer;
    e->fn = fn;
    e->flags = d ? ST_F_NESTED : 0;
    if (ST_UNLIKELY(d >= ST_OPEN_CALLS)) {
        layer_call_write(t, e); /* deeper than the state keeps: written now */
        c->number = e->number;
        return;
    }
    t->unwritten_calls++; /* the CALL is written by the first record that follows, or at the end */
}

/* `ret` as the function returned it (stored as a signed 32-bit value); `err` whether that is an
 * error; `idle` whether the call did nothing the caller will not try again (refused for lack
 * of resources, a flush still waiting): if it also made no record, it is folded into the next
 * call of the same function on the same endpoint instead of being recorded (a program's retry
 * loop would otherwise fill the ring); `addr` the libfabric destination fi_addr_t (0
 * elsewhere); `extra` ST_CALL_WQE_RANGE(...) when the call's send queue is known, else 0. */
static LAYER_INLINE void layer_call_end(struct layer_call *c, int64_t ret, int err, int idle, uint32_t qpn,
                                        uint64_t addr, uint64_t extra)
{
    struct st_thread *t = c->t;
    if (!c->open || ST_UNLIKELY(t->gen != st_g.gen))
        return; /* not recorded at entry, or the session ended during the call */
    uint32_t d = c->depth;
    if (ST_UNLIKELY(t->call_depth != d + 1) && !st_layer_calls_resync(t, d)) {
        t->call_depth = d; /* calls left without returning around it: its own entry is gone */
        return;
    }
    t->call_depth = d;
    struct st_open_call deep, *e = &t->open[d < ST_OPEN_CALLS ? d : 0];
    if (ST_UNLIKELY(d >= ST_OPEN_CALLS)) { /* its CALL was written at entry */
        deep.layer = c->layer;
        deep.fn = c->fn;
        deep.number = c->number;
        deep.tries = 0;
        deep.written = 1;
        e = &deep;
    }
    if (!e->written) {
        t->unwritten_calls--;
        if (idle) {
            struct st_call_retry *rt = &t->retry;
            if (!layer_retry_matches(t, e)) {
                rt->ts = e->ts;
                rt->layer = e->layer;
                rt->fn = e->fn;
                rt->ep = e->ep;
                rt->head = t->head;
                rt->count = 0;
            }
            if (rt->count != UINT32_MAX)
                rt->count++;
            t->live->layer_retries[e->layer - 1]++;
            return;
        }
        layer_call_write(t, e);
    }
    struct st_record *r = st_rec_reserve(t);
    if (ST_UNLIKELY(!r))
        return;
    r->ts = st_now();
    st_rec_word1(r, ST_REC_CALL_END, err ? ST_F_ERR : 0, e->fn, e->layer, qpn);
    r->len = e->tries;
    r->key = (uint32_t)(int32_t)ret;
    r->addr = addr;
    r->extra = extra;
    r->aux32 = e->number;
    st_rec_commit(t, r);
}

#endif
