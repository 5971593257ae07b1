/* The cold halves of layer_call.h: writing the CALL records that wait when a record of their
 * thread follows, and putting the stack of open calls right after calls that never returned. */
#include "layer_call.h"

ST_COLD void st_layer_calls_write(struct st_thread *t)
{
    t->unwritten_calls = 0; /* first: layer_call_write reserves records itself */
    uint32_t n = t->call_depth < ST_OPEN_CALLS ? t->call_depth : ST_OPEN_CALLS;
    for (uint32_t i = 0; i < n; i++) /* outermost first: the order they were entered in */
        if (!t->open[i].written)
            layer_call_write(t, &t->open[i]);
}

ST_COLD int st_layer_calls_resync(struct st_thread *t, uint32_t d)
{
    static int told;
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        st_error("layers", "thread %u: a UCX or libfabric call was left without returning (longjmp, or a "
                 "stack switch); the calls open around it may be paired wrongly", t->tid);
    int kept = d < t->call_depth; /* else its entry was forgotten already, and may be reused */
    uint32_t n = d + 1 < ST_OPEN_CALLS ? d + 1 : ST_OPEN_CALLS;
    uint32_t waiting = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i >= t->call_depth)
            t->open[i].written = 1; /* a stale entry: never to be written */
        waiting += !t->open[i].written;
    }
    t->unwritten_calls = waiting;
    t->call_depth = d + 1;
    return kept;
}
