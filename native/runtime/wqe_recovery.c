/* WQE recovery: copies decided by producer index, batched synchronisation, parsing, and the
 * accounting that makes every announced basic block appear exactly once in the trace. */
#include <stdlib.h>
#include <string.h>

#include "db_env.h"
#include "db_thread.h"
#include "wqe_recovery.h"

static int host_copy(struct db_copier *c, void *dst, uint64_t src, size_t n)
{
    (void)c;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}
static int host_sync(struct db_copier *c)
{
    (void)c;
    return 0;
}
struct db_copier db_host_copier = {host_copy, host_sync, 0, NULL, NULL};

int wqe_rec_init(struct wqe_rec *r, uint32_t qpn, int st, uint32_t slots, uint64_t sq_addr,
                 uint8_t *mirror, struct db_copier *cp, uint32_t threshold,
                 struct st_live_qp *live, int emit)
{
    memset(r, 0, sizeof(*r));
    if (slots == 0 || (slots & (slots - 1)))
        return -1;
    r->qpn = qpn;
    r->st = st;
    r->slots = slots;
    r->sq_addr = sq_addr;
    r->mirror = mirror;
    r->cp = cp;
    uint32_t max = slots > 1 ? slots / 2 : 1;
    r->threshold = threshold < 1 ? 1 : threshold > max ? max : threshold;
    r->emit = emit;
    r->copy_chunk = 1;
    /* each doorbell in the queue announces at least one block and the queue is drained once
     * `threshold` blocks wait, so threshold + 1 entries suffice; keep a margin */
    r->q_cap = r->threshold + 2;
    r->q_pi = calloc(r->q_cap, sizeof(uint64_t));
    r->q_ts = calloc(r->q_cap, sizeof(uint64_t));
    if (!r->q_pi || !r->q_ts) {
        free(r->q_pi);
        free(r->q_ts);
        return -1;
    }
    r->live = live ? live : &r->priv;
    r->copies = &r->own_copies;
    r->syncs = &r->own_syncs;
    return 0;
}

void wqe_rec_fini(struct wqe_rec *r)
{
    free(r->q_pi);
    free(r->q_ts);
    r->q_pi = r->q_ts = NULL;
}

/* ---- records ---------------------------------------------------------------------------- */

void wqe_loss(struct st_live_qp *live, uint32_t qpn, uint64_t first, uint64_t n, uint64_t ts, int emit)
{
    if (!n)
        return;
    live->wqe_losses += n;
    if (!emit)
        return;
    struct st_record rec = {0};
    rec.ts = ts;
    rec.type = ST_REC_WQE_LOSS;
    rec.qpn = qpn;
    rec.aux32 = (uint32_t)first;
    rec.len = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    db_emit(&rec);
}

/* A continuation record of the WQE record just emitted: zeroed but for its time, type, flags
 * and QP; the caller fills its own fields. */
static inline struct st_record cont_rec(uint8_t type, uint8_t flags, uint64_t ts, uint32_t qpn)
{
    struct st_record c = {0};
    c.ts = ts;
    c.type = type;
    c.flags = ST_F_CONT | flags;
    c.qpn = qpn;
    return c;
}

static void emit_wqe(struct wqe_rec *r, const struct wqe_info *w, uint64_t ts)
{
    /* a batch parsed after recording stopped belongs to no session: neither record nor count
     * it, so the live counters and the records of a session agree */
    if (r->emit && !db_thread_recording())
        return;
    struct st_live_qp *l = r->live;
    l->wqes++;
    l->wqe_bytes += w->bytes;
    l->wqe_ops[w->opcode & (ST_LIVE_MLX5_OPS - 1)]++;
    l->wqe_op_bytes[w->opcode & (ST_LIVE_MLX5_OPS - 1)] += w->bytes;
    if (!r->emit)
        return;
    struct st_record rec = {0};
    rec.ts = ts;
    rec.type = ST_REC_WQE;
    rec.flags = w->flags | (w->trunc ? ST_F_TRUNC : 0);
    rec.op = w->opcode;
    rec.aux = w->ds;
    rec.qpn = r->qpn;
    rec.len = w->bytes;
    rec.key = w->rkey;
    rec.addr = w->raddr;
    rec.extra = ((uint64_t)w->opmod << 32) | w->imm;
    rec.aux32 = (uint32_t)w->idx;
    db_emit(&rec);
    if (w->has_av) {
        struct st_record av = cont_rec(ST_REC_WQE_AV, 0, ts, r->qpn);
        av.aux32 = w->av_qpn;
        av.extra = w->dc_key;
        av.key = w->av_lid;
        db_emit(&av);
    }
    if (w->has_atomic) {
        struct st_record at = cont_rec(ST_REC_WQE_ATOMIC, 0, ts, r->qpn);
        at.op = w->opcode;
        at.len = w->amo_size;
        at.addr = w->compare;
        at.extra = w->swap_add;
        at.aux32 = (uint32_t)w->idx;
        db_emit(&at);
        if (w->has_masks) { /* a second one: the masks (FA: the field boundary in extra) */
            at.aux = 1;
            at.addr = w->compare_mask;
            at.extra = w->swap_mask;
            db_emit(&at);
        }
    }
    for (uint32_t i = 0; i < w->nseg; i++) {
        struct st_record s = cont_rec(ST_REC_WQE_SEG, w->seg[i].is_inline ? ST_F_INLINE : 0, ts, r->qpn);
        s.aux = (uint8_t)i;
        s.len = w->seg[i].len;
        s.key = w->seg[i].lkey;
        s.addr = w->seg[i].addr;
        s.aux32 = (uint32_t)w->idx;
        db_emit(&s);
    }
}

/* ---- doorbell time queue ------------------------------------------------------------------ */

static void q_push(struct wqe_rec *r, uint64_t pi, uint64_t ts)
{
    uint32_t at = (r->q_head + r->q_len) % r->q_cap;
    r->q_pi[at] = pi;
    r->q_ts[at] = ts;
    r->q_len++;
}

/* The time of the doorbell that announced block `idx`: drop doorbells that ended at or before it. */
static uint64_t q_time_of(struct wqe_rec *r, uint64_t idx, uint64_t fallback)
{
    while (r->q_len > 1 && r->q_pi[r->q_head] <= idx) {
        r->q_head = (r->q_head + 1) % r->q_cap;
        r->q_len--;
    }
    return r->q_len ? r->q_ts[r->q_head] : fallback;
}

static void q_drop_upto(struct wqe_rec *r, uint64_t pi)
{
    while (r->q_len && r->q_pi[r->q_head] <= pi) {
        r->q_head = (r->q_head + 1) % r->q_cap;
        r->q_len--;
    }
}

/* ---- copies, sync, parse ------------------------------------------------------------------ */

/* Copy blocks [from, to) (at most one ring) into the mirror: one copy, two where the range wraps. */
/* Of blocks [from, to), those before the end of the ring: their count, and in *off the byte
 * offset where they start (in the ring and in its mirror alike). */
static uint64_t ring_run(const struct wqe_rec *r, uint64_t from, uint64_t to, size_t *off)
{
    uint32_t slot = (uint32_t)(from & (r->slots - 1));
    *off = (size_t)slot << MLX5_BB_SHIFT;
    return to - from < r->slots - slot ? to - from : r->slots - slot;
}

static void copy_range(struct wqe_rec *r, uint64_t from, uint64_t to)
{
    while (from < to) {
        size_t off;
        uint64_t n = ring_run(r, from, to, &off);
        if (r->cp->copy(r->cp, r->mirror + off, r->sq_addr + off, (size_t)n << MLX5_BB_SHIFT) != 0) {
            if (r->copy_errors++ == 0)
                db_error("wqe_recovery", "copy of %llu send-queue blocks of qp 0x%x failed; they will be counted as lost",
                         (unsigned long long)n, r->qpn);
        }
        (*r->copies)++;
        from += n;
    }
}

static void sync_copies(struct wqe_rec *r)
{
    if (!r->cp->async)
        return;
    if (r->cp->sync(r->cp) != 0 && r->copy_errors++ == 0)
        db_error("wqe_recovery", "synchronising send-queue copies of qp 0x%x failed", r->qpn);
    (*r->syncs)++;
}

/* Account for blocks [parsed, upto): WQEs that check out, runs of blocks that do not as losses. */
static void parse_upto(struct wqe_rec *r, uint64_t upto)
{
    struct wqe_info w;
    uint64_t p = r->parsed, loss_from = 0, loss_n = 0, loss_ts = 0;
    while (p < upto) {
        uint64_t ts = q_time_of(r, p, 0);
        int n = wqe_parse(r->mirror, r->slots, p, upto, r->st, &w);
        if (n > 0) {
            wqe_loss(r->live, r->qpn, loss_from, loss_n, loss_ts, r->emit);
            loss_n = 0;
            emit_wqe(r, &w, ts);
            p += (uint64_t)n;
        } else {
            /* not the WQE the producer index says is here (overwritten before the copy, never
             * written, or a copy failed): count one block and look at the next */
            if (!loss_n) {
                loss_from = p;
                loss_ts = ts;
            }
            loss_n++;
            p++;
        }
    }
    wqe_loss(r->live, r->qpn, loss_from, loss_n, loss_ts, r->emit);
    r->parsed = upto;
    r->live->wqe_pi = upto;
    q_drop_upto(r, upto);
}

/* Release an armed copy.  If it was still ours to fire and starts where the copies stand, the
 * blocks it covers up to `pi` count as copied (beyond `pi` it copied blocks nobody announced
 * yet: they are copied again when they are). */
static void fire_armed(struct wqe_rec *r, uint64_t pi)
{
    if (!r->arm_id)
        return;
    int ours = r->cp->fire(r->cp, r->arm_id);
    r->arm_id = 0;
    if (ours && r->copied == r->arm_from && pi > r->copied) {
        r->copied = pi < r->arm_to ? pi : r->arm_to;
        (*r->copies)++;
        r->armed_used++;
    }
}

void wqe_rec_disarm(struct wqe_rec *r)
{
    if (r->arm_id) {
        r->cp->fire(r->cp, r->arm_id);
        r->arm_id = 0;
    }
}

int wqe_rec_arm(struct wqe_rec *r)
{
    if (r->arm_id || !r->arm_blocks || !r->cp->arm || r->copied != r->pi)
        return 0;
    /* mirror slots [copied, copied + n) must not hold blocks still to parse */
    uint64_t room = r->slots - (r->copied - r->parsed), n = r->arm_blocks < room ? r->arm_blocks : room;
    if (!n)
        return 0;
    void *dst[2];
    uint64_t src[2];
    size_t len[2];
    int nseg = 0;
    for (uint64_t from = r->copied, to = r->copied + n; from < to && nseg < 2; nseg++) {
        size_t off;
        uint64_t k = ring_run(r, from, to, &off);
        dst[nseg] = r->mirror + off;
        src[nseg] = r->sq_addr + off;
        len[nseg] = (size_t)k << MLX5_BB_SHIFT;
        from += k;
    }
    uint64_t id = r->cp->arm(r->cp, dst, src, len, nseg);
    if (!id)
        return 0;
    r->arm_id = id;
    r->arm_from = r->copied;
    r->arm_to = r->copied + n;
    return 1;
}

int wqe_rec_announce(struct wqe_rec *r, uint64_t pi, uint64_t ts)
{
    if (pi <= r->pi)
        return 0;
    fire_armed(r, pi);
    if (r->q_len == r->q_cap) /* cannot happen while threshold holds; keep the queue bounded */
        wqe_rec_flush(r);
    if (pi - r->parsed > r->slots) {
        /* The producer ran more than a whole ring ahead of what was accounted: the oldest blocks
         * were overwritten before they could be copied.  Account what earlier copies hold, then
         * the blocks nobody can recover any more. */
        sync_copies(r);
        parse_upto(r, r->copied);
        uint64_t keep = pi - r->slots;
        if (keep > r->parsed) {
            wqe_loss(r->live, r->qpn, r->parsed, keep - r->parsed, ts, r->emit);
            r->parsed = r->copied = keep;
            r->live->wqe_pi = keep;
            q_drop_upto(r, keep);
        }
    }
    q_push(r, pi, ts);
    r->pi = pi;
    int parse = pi - r->parsed >= r->threshold;
    /* copies cover ranges of at least copy_chunk blocks (one per doorbell when each announces
     * that many): the copy engine and the repeater's time go further at high doorbell rates */
    if (parse || pi - r->copied >= r->copy_chunk) {
        copy_range(r, r->copied, pi);
        r->copied = pi;
    }
    if (parse) {
        sync_copies(r);
        parse_upto(r, pi);
        return 1;
    }
    return 0;
}

void wqe_rec_flush(struct wqe_rec *r)
{
    fire_armed(r, r->pi);
    if (r->parsed == r->pi)
        return;
    if (r->copied < r->pi) {
        copy_range(r, r->copied, r->pi);
        r->copied = r->pi;
    }
    sync_copies(r);
    parse_upto(r, r->pi);
}
