/* SPSC byte ring (see sn_wire.h).  Records are 64-byte aligned and never wrap: a record that
 * would cross the end is preceded by a PAD record filling the rest of the ring. */
#include <string.h>

#include "sn_wire.h"

void sn_ring_attach(struct sn_ring *r, struct sn_ring_ctl *ctl, uint8_t *data, uint64_t size,
                    int producer)
{
    r->ctl = ctl;
    r->data = data;
    r->size = size;
    if (producer) {
        r->pos = atomic_load_explicit(&ctl->head, memory_order_relaxed);
        r->cached = atomic_load_explicit(&ctl->tail, memory_order_acquire);
    } else {
        r->pos = atomic_load_explicit(&ctl->tail, memory_order_relaxed);
        r->cached = atomic_load_explicit(&ctl->head, memory_order_acquire);
    }
}

uint64_t sn_ring_free(struct sn_ring *r)
{
    r->cached = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
    return r->size - (r->pos - r->cached);
}

struct sn_msg *sn_ring_reserve(struct sn_ring *r, uint32_t payload)
{
    uint64_t need = sn_rec_bytes(payload);
    uint64_t off = r->pos & (r->size - 1);
    uint64_t pad = (off + need > r->size) ? r->size - off : 0;
    struct sn_msg *m;

    if (need > r->size / 4)
        return NULL;
    if (r->size - (r->pos - r->cached) < pad + need) {
        r->cached = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
        if (r->size - (r->pos - r->cached) < pad + need)
            return NULL;
    }
    if (pad) {
        m = (struct sn_msg *)(r->data + off);
        m->type = SN_MSG_PAD;
        m->len = (uint32_t)(pad - SN_MSG_HDR);
        r->pos += pad;
        off = 0;
    }
    m = (struct sn_msg *)(r->data + off);
    r->pos += need;
    return m;
}

void sn_ring_publish(struct sn_ring *r)
{
    atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
}

struct sn_msg *sn_ring_peek(struct sn_ring *r)
{
    for (;;) {
        struct sn_msg *m;

        if (r->pos == r->cached) {
            r->cached = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
            if (r->pos == r->cached)
                return NULL;
        }
        m = (struct sn_msg *)(r->data + (r->pos & (r->size - 1)));
        if (m->type != SN_MSG_PAD)
            return m;
        r->pos += SN_MSG_HDR + m->len;
    }
}

void sn_ring_consume(struct sn_ring *r, const struct sn_msg *m)
{
    r->pos += sn_rec_bytes(m->len);
}

void sn_ring_release_publish(struct sn_ring *r)
{
    atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_release);
}
