/* The block encoder: records of a ring, packed column by column into a version 2 stream block
 * (FORMAT.md, struct st_block_header).  Each column keeps its minimum as the block's base and
 * stores every record's distance from it in the fewest bytes (0, 1, 2, 4 or 8) that the
 * block's spread needs: a constant field costs nothing, a counter or a timestamp a few bytes. */
#include <string.h>

#include "rt.h"

static unsigned st_width_of(uint64_t spread)
{
    if (spread == 0)
        return 0;
    if (spread <= 0xff)
        return 1;
    if (spread <= 0xffff)
        return 2;
    if (spread <= 0xffffffffu)
        return 4;
    return 8;
}

static unsigned char *st_put(unsigned char *p, uint64_t v, unsigned w)
{
    /* little-endian, as every machine the runtime runs on */
    memcpy(p, &v, w);
    return p + w;
}

/* One column's offsets, `w` bytes each. */
#define ST_COLUMN(field, base, w, out)                                                         \
    do {                                                                                       \
        unsigned char *o_ = (out);                                                             \
        switch (w) {                                                                           \
        case 1:                                                                                \
            for (uint32_t i = 0; i < n; i++)                                                   \
                o_[i] = (uint8_t)(r[i].field - (base));                                        \
            break;                                                                             \
        case 2:                                                                                \
            for (uint32_t i = 0; i < n; i++) {                                                 \
                uint16_t v_ = (uint16_t)(r[i].field - (base));                                 \
                memcpy(o_ + 2 * i, &v_, 2);                                                    \
            }                                                                                  \
            break;                                                                             \
        case 4:                                                                                \
            for (uint32_t i = 0; i < n; i++) {                                                 \
                uint32_t v_ = (uint32_t)(r[i].field - (base));                                 \
                memcpy(o_ + 4 * i, &v_, 4);                                                    \
            }                                                                                  \
            break;                                                                             \
        case 8:                                                                                \
            for (uint32_t i = 0; i < n; i++) {                                                 \
                uint64_t v_ = (uint64_t)(r[i].field - (base));                                 \
                memcpy(o_ + 8 * i, &v_, 8);                                                    \
            }                                                                                  \
            break;                                                                             \
        }                                                                                      \
        (out) += (size_t)(w) * n;                                                              \
    } while (0)

size_t st_block_encode(const struct st_record *r, uint32_t n, unsigned char *out)
{
    /* one pass for every column's range */
    uint64_t ts_lo = r[0].ts, ts_hi = r[0].ts, addr_lo = r[0].addr, addr_hi = r[0].addr;
    uint64_t ex_lo = r[0].extra, ex_hi = r[0].extra;
    uint32_t qpn_lo = r[0].qpn, qpn_hi = r[0].qpn, len_lo = r[0].len, len_hi = r[0].len;
    uint32_t key_lo = r[0].key, key_hi = r[0].key, a32_lo = r[0].aux32, a32_hi = r[0].aux32;
    uint8_t ty_lo = r[0].type, ty_hi = r[0].type, fl_lo = r[0].flags, fl_hi = r[0].flags;
    uint8_t op_lo = r[0].op, op_hi = r[0].op, ax_lo = r[0].aux, ax_hi = r[0].aux;
/* branch-free (conditional moves): a counter or a timestamp moves `hi` on every record */
#define ST_RANGE(f, lo, hi)                                                                     \
    do {                                                                                       \
        lo = r[i].f < lo ? r[i].f : lo;                                                        \
        hi = r[i].f > hi ? r[i].f : hi;                                                        \
    } while (0)
    for (uint32_t i = 1; i < n; i++) {
        ST_RANGE(ts, ts_lo, ts_hi);
        ST_RANGE(type, ty_lo, ty_hi);
        ST_RANGE(flags, fl_lo, fl_hi);
        ST_RANGE(op, op_lo, op_hi);
        ST_RANGE(aux, ax_lo, ax_hi);
        ST_RANGE(qpn, qpn_lo, qpn_hi);
        ST_RANGE(len, len_lo, len_hi);
        ST_RANGE(key, key_lo, key_hi);
        ST_RANGE(addr, addr_lo, addr_hi);
        ST_RANGE(extra, ex_lo, ex_hi);
        ST_RANGE(aux32, a32_lo, a32_hi);
    }
#undef ST_RANGE
    struct st_block_header h;
    memset(&h, 0, sizeof(h));
    h.magic = ST_BLOCK_MAGIC;
    h.count = n;
    h.first_seq = r[0].seq;
    h.width[ST_COL_TS] = (uint8_t)st_width_of(ts_hi - ts_lo);
    h.width[ST_COL_TYPE] = (uint8_t)st_width_of((uint64_t)(ty_hi - ty_lo));
    h.width[ST_COL_FLAGS] = (uint8_t)st_width_of((uint64_t)(fl_hi - fl_lo));
    h.width[ST_COL_OP] = (uint8_t)st_width_of((uint64_t)(op_hi - op_lo));
    h.width[ST_COL_AUX] = (uint8_t)st_width_of((uint64_t)(ax_hi - ax_lo));
    h.width[ST_COL_QPN] = (uint8_t)st_width_of((uint64_t)(qpn_hi - qpn_lo));
    h.width[ST_COL_LEN] = (uint8_t)st_width_of((uint64_t)(len_hi - len_lo));
    h.width[ST_COL_KEY] = (uint8_t)st_width_of((uint64_t)(key_hi - key_lo));
    h.width[ST_COL_ADDR] = (uint8_t)st_width_of(addr_hi - addr_lo);
    h.width[ST_COL_EXTRA] = (uint8_t)st_width_of(ex_hi - ex_lo);
    h.width[ST_COL_AUX32] = (uint8_t)st_width_of((uint64_t)(a32_hi - a32_lo));

    unsigned char *p = out + sizeof(h);
    p = st_put(p, ts_lo, 8);
    p = st_put(p, ty_lo, 1);
    p = st_put(p, fl_lo, 1);
    p = st_put(p, op_lo, 1);
    p = st_put(p, ax_lo, 1);
    p = st_put(p, qpn_lo, 4);
    p = st_put(p, len_lo, 4);
    p = st_put(p, key_lo, 4);
    p = st_put(p, addr_lo, 8);
    p = st_put(p, ex_lo, 8);
    p = st_put(p, a32_lo, 4);
    ST_COLUMN(ts, ts_lo, h.width[ST_COL_TS], p);
    ST_COLUMN(type, ty_lo, h.width[ST_COL_TYPE], p);
    ST_COLUMN(flags, fl_lo, h.width[ST_COL_FLAGS], p);
    ST_COLUMN(op, op_lo, h.width[ST_COL_OP], p);
    ST_COLUMN(aux, ax_lo, h.width[ST_COL_AUX], p);
    ST_COLUMN(qpn, qpn_lo, h.width[ST_COL_QPN], p);
    ST_COLUMN(len, len_lo, h.width[ST_COL_LEN], p);
    ST_COLUMN(key, key_lo, h.width[ST_COL_KEY], p);
    ST_COLUMN(addr, addr_lo, h.width[ST_COL_ADDR], p);
    ST_COLUMN(extra, ex_lo, h.width[ST_COL_EXTRA], p);
    ST_COLUMN(aux32, a32_lo, h.width[ST_COL_AUX32], p);
    h.size = (uint32_t)(p - out);
    memcpy(out, &h, sizeof(h));
    return (size_t)(p - out);
}
