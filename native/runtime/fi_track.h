/* fi_track.h: libfabric objects the hooks follow (fabrics, domains, address vectors, endpoints),
 * each with its own copy of every ops table it points at.
 *
 * An object's table pointers (struct fid's ops, then the object's own: fabric and domain ops,
 * av ops, an endpoint's cm, msg, rma, tagged and atomic tables) sit at 16 + 8 * i bytes into it.
 * Tracking an object copies each table (its size word says how long it is) into the object's
 * record, puts our functions in the slots we hook, and points the object at the copy with one
 * aligned 8-byte store.  The originals are kept in the record.
 *
 * Records live in one reserved region, FI_OBJ_BYTES each and aligned to it: a hook reached
 * through a copy finds the record, and the original, from the table pointer alone (a subtraction
 * and a mask).  Records are never freed or reused for another object's copies (a thread may be
 * inside a hook while its object is closed).
 */
#ifndef SIGMATRACE_FI_TRACK_H
#define SIGMATRACE_FI_TRACK_H

#include <stdint.h>

#include "fi_abi.h"
#include "rt.h"

enum fi_tbl { FI_TBL_FID = 0, FI_TBL_OPS, FI_TBL_CM, FI_TBL_MSG, FI_TBL_RMA, FI_TBL_TAGGED, FI_TBL_ATOMIC, FI_TBL_N };
enum fi_kind { FI_KIND_FABRIC = 1, FI_KIND_DOMAIN, FI_KIND_AV, FI_KIND_EP };

#define FI_TBL_BYTES 224                /* largest table copied (1.x atomic: 120 bytes) */
#define FI_OBJ_BYTES 4096u              /* one record; a power of two */
#define FI_ARENA_BYTES (64u << 20)      /* 16384 records, reserved, touched as used */

struct fi_obj {
    void *obj;               /* the object (NULL once closed) */
    void *orig[FI_TBL_N];    /* the tables to call through: the only line a hot hook reads */
    void *ours[FI_TBL_N];    /* the copy stored in the object, NULL where not replaced */
    void *own[FI_TBL_N];     /* the pointer the object held before: put back when we let go */
    struct fi_obj *parent;   /* an endpoint's or av's domain, a domain's fabric */
    uint32_t kind, addr_format;
    int ep_type;
    char prov[40];           /* provider name ("verbs", "verbs;ofi_rxm") */
    unsigned char copy[FI_TBL_N][FI_TBL_BYTES] __attribute__((aligned(64)));
    /* A provider may write a new table through the object's pointer (the verbs provider does,
     * into a table it allocated per endpoint, when an endpoint is bound to a shared receive
     * context): that lands in our copy.  What it wrote becomes the table to call through,
     * kept here, and goes back into the provider's own table when we let go. */
    unsigned char shadow[FI_TBL_N][FI_TBL_BYTES] __attribute__((aligned(64)));
};

extern char *fi_arena; /* NULL until the first object is tracked */

/* The original table an object's hook calls through: from the table pointer the hook was
 * reached by (our copy), else (tables restored, or moved by someone else) by looking the object
 * up.  NULL only for an object never tracked. */
void *const *fi_orig_slow(const void *obj, int tbl);
static inline void *const *fi_orig(const void *obj, const void *tbl, int t)
{
    uintptr_t off = (uintptr_t)tbl - (uintptr_t)fi_arena;
    if (ST_LIKELY(off < FI_ARENA_BYTES))
        return (void *const *)((struct fi_obj *)(fi_arena + (off & ~(uintptr_t)(FI_OBJ_BYTES - 1))))->orig[t];
    return fi_orig_slow(obj, t);
}

/* The record of `obj`, made if new (cold path; NULL when the region is full: counted, said).
 * Then fi_sync: every table of the kind is pointed at our copy, copied again if the object
 * was given another table since. */
struct fi_obj *fi_track(void *obj, int kind, struct fi_obj *parent);
void fi_sync(struct fi_obj *o);
/* The object is being closed: its own tables back (a provider may free them), then forgotten
 * once the close succeeded (its address may hold another object next). */
void fi_release(struct fi_obj *o);
void fi_forget(struct fi_obj *o);
/* The record of a tracked object, or NULL. */
struct fi_obj *fi_find(const void *obj);
/* The record reached through one of its tables (hooks of the fid, fabric, domain, av, cm tables). */
struct fi_obj *fi_obj_of(const void *obj, const void *tbl);

/* Our function for slot `slot` of table `tbl` of an object of `kind`, or NULL (left as is). */
void *fi_hot_hook(int tbl, int slot);          /* msg, rma, tagged, atomic: fi_hot.c */
void *fi_cold_hook(int kind, int tbl, int slot); /* fid, fabric, domain, av, cm: fi_cold.c */

#endif
