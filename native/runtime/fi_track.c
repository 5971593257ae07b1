/* The records of the libfabric objects the hooks follow, their table copies, and putting the
 * originals back when tracing stops (fi_track.h). */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "fi_track.h"

char *fi_arena;
static uint32_t fi_nobj;      /* records handed out (published with release) */
static int fi_full_said;
static pthread_mutex_t fi_lock = PTHREAD_MUTEX_INITIALIZER;

static inline struct fi_obj *fi_rec(uint32_t i) { return (struct fi_obj *)(fi_arena + (size_t)i * FI_OBJ_BYTES); }

static inline void **fi_tbl_ptr(void *obj, int t) { return (void **)((char *)obj + 16 + 8 * t); }

/* Which tables an object of each kind has (bit per enum fi_tbl). */
static unsigned fi_tables_of(int kind)
{
    if (kind == FI_KIND_EP)
        return 1u << FI_TBL_FID | 1u << FI_TBL_OPS | 1u << FI_TBL_CM | 1u << FI_TBL_MSG | 1u << FI_TBL_RMA | 1u << FI_TBL_TAGGED |
               1u << FI_TBL_ATOMIC;
    return 1u << FI_TBL_FID | 1u << FI_TBL_OPS;
}

struct fi_obj *fi_find(const void *obj)
{
    if (!obj || !fi_arena)
        return NULL;
    uint32_t n = __atomic_load_n(&fi_nobj, __ATOMIC_ACQUIRE);
    for (uint32_t i = n; i-- > 0;) /* newest first: an address reused holds the latest object */
        if (__atomic_load_n(&fi_rec(i)->obj, __ATOMIC_ACQUIRE) == obj)
            return fi_rec(i);
    return NULL;
}

ST_COLD void *const *fi_orig_slow(const void *obj, int tbl)
{
    struct fi_obj *o = fi_find(obj);
    return o ? (void *const *)__atomic_load_n(&o->orig[tbl], __ATOMIC_ACQUIRE) : NULL;
}

struct fi_obj *fi_obj_of(const void *obj, const void *tbl)
{
    uintptr_t off = (uintptr_t)tbl - (uintptr_t)fi_arena;
    if (fi_arena && off < FI_ARENA_BYTES)
        return (struct fi_obj *)(fi_arena + (off & ~(uintptr_t)(FI_OBJ_BYTES - 1)));
    return fi_find(obj);
}

static int fi_in_arena(const void *p)
{
    return fi_arena && (uintptr_t)p - (uintptr_t)fi_arena < FI_ARENA_BYTES;
}

static void *fi_hook_of(const struct fi_obj *o, int t, int s)
{
    return t >= FI_TBL_MSG ? fi_hot_hook(t, s) : fi_cold_hook((int)o->kind, t, s);
}

/* Fill our copy of table `t` from `src` (the table to call through): its words, ours in the
 * slots we hook.  Whole-word stores: threads may be calling through the copy. */
static void fi_fill_copy(struct fi_obj *o, int t, void *const *src, size_t size)
{
    void **copy = (void **)o->copy[t];
    for (size_t s = 0; s < size / 8; s++) {
        void *h = s && src[s] ? fi_hook_of(o, t, (int)s) : NULL;
        __atomic_store_n(&copy[s], h ? h : src[s], __ATOMIC_RELAXED);
    }
}

/* The provider wrote into our copy (through the object's pointer) since we filled it: what it
 * wrote becomes the table to call through (the shadow), and our hooks go back in. */
static void fi_take_writes(struct fi_obj *o, int t)
{
    void **copy = (void **)o->copy[t];
    void *const *orig = o->orig[t];
    size_t size = *(const size_t *)orig;
    int changed = 0;
    for (size_t s = 1; s < size / 8; s++) {
        void *h = orig[s] ? fi_hook_of(o, t, (int)s) : NULL;
        if (copy[s] != (h ? h : orig[s]))
            changed = 1;
    }
    if (!changed)
        return;
    void **shadow = (void **)o->shadow[t];
    void *next[FI_TBL_BYTES / 8];
    for (size_t s = 0; s < size / 8; s++) {
        void *h = s && orig[s] ? fi_hook_of(o, t, (int)s) : NULL;
        next[s] = s && copy[s] != (h ? h : orig[s]) ? copy[s] : orig[s];
    }
    for (size_t s = 0; s < size / 8; s++)
        __atomic_store_n(&shadow[s], next[s], __ATOMIC_RELAXED);
    __atomic_store_n(&o->orig[t], (void *)shadow, __ATOMIC_RELEASE);
    fi_fill_copy(o, t, (void *const *)shadow, size);
}

/* Point the object's slot `t` at our copy of the table it holds.  Called with fi_lock held. */
static void fi_hook_table(struct fi_obj *o, int t)
{
    void **slot = fi_tbl_ptr(o->obj, t);
    void *cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (cur && cur == o->copy[t] && o->ours[t]) {
        fi_take_writes(o, t);
        return;
    }
    if (!cur || fi_in_arena(cur))
        return; /* none, or another object's copy (a provider copied the pointer) */
    size_t size = *(const size_t *)cur;
    if (size < 16 || size > FI_TBL_BYTES || size % 8) {
        st_error("libfabric", "object 0x%lx: an ops table of %zu bytes (kind %u, table %d) is not traced",
                 (unsigned long)o->obj, size, o->kind, t);
        return;
    }
    o->own[t] = cur;
    __atomic_store_n(&o->orig[t], cur, __ATOMIC_RELEASE); /* before any thread can reach a hook */
    fi_fill_copy(o, t, (void *const *)cur, size);
    o->ours[t] = o->copy[t];
    __atomic_store_n(slot, (void *)o->copy[t], __ATOMIC_RELEASE);
}

/* Give the object its own tables back (with fi_lock held): what the provider wrote into our copy
 * goes into its table first, then the pointer, where it still holds our copy. */
static void fi_unhook(struct fi_obj *o)
{
    for (int t = 0; t < FI_TBL_N; t++) {
        void *expect = o->ours[t];
        if (!expect)
            continue;
        fi_take_writes(o, t);
        if (o->orig[t] != o->own[t]) {
            void **dst = o->own[t];
            void *const *src = o->orig[t];
            size_t size = *(const size_t *)src;
            for (size_t s = 1; s < size / 8; s++)
                __atomic_store_n(&dst[s], src[s], __ATOMIC_RELAXED);
        }
        __atomic_compare_exchange_n(fi_tbl_ptr(o->obj, t), &expect, o->own[t], 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
        o->ours[t] = NULL;
    }
}

void fi_sync(struct fi_obj *o)
{
    if (!o || !o->obj || !st_recording())
        return;
    pthread_mutex_lock(&fi_lock);
    unsigned tables = fi_tables_of((int)o->kind);
    for (int t = 0; t < FI_TBL_N; t++)
        if (tables & (1u << t))
            fi_hook_table(o, t);
    pthread_mutex_unlock(&fi_lock);
}

struct fi_obj *fi_track(void *obj, int kind, struct fi_obj *parent)
{
    if (!obj || !st_recording())
        return NULL;
    pthread_mutex_lock(&fi_lock);
    if (!fi_arena) {
        void *p = mmap(NULL, FI_ARENA_BYTES + FI_OBJ_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            pthread_mutex_unlock(&fi_lock);
            st_error("libfabric", "no region for object records: libfabric calls are not traced");
            return NULL;
        }
        /* aligned to a record, so a table pointer's record is found by masking */
        uintptr_t a = ((uintptr_t)p + FI_OBJ_BYTES - 1) & ~(uintptr_t)(FI_OBJ_BYTES - 1);
        __atomic_store_n(&fi_arena, (char *)a, __ATOMIC_RELEASE);
    }
    struct fi_obj *o = NULL;
    for (uint32_t i = fi_nobj; i-- > 0;)
        if (fi_rec(i)->obj == obj && fi_rec(i)->kind == (uint32_t)kind) {
            o = fi_rec(i);
            break;
        }
    if (!o) {
        if ((size_t)(fi_nobj + 1) * FI_OBJ_BYTES > FI_ARENA_BYTES) {
            int said = fi_full_said++;
            pthread_mutex_unlock(&fi_lock);
            if (!said)
                st_error("libfabric", "more than %u objects: later ones are not traced", FI_ARENA_BYTES / FI_OBJ_BYTES);
            return NULL;
        }
        o = fi_rec(fi_nobj);
        memset(o, 0, offsetof(struct fi_obj, copy));
        o->obj = obj;
        o->kind = (uint32_t)kind;
        __atomic_store_n(&fi_nobj, fi_nobj + 1, __ATOMIC_RELEASE);
    }
    o->parent = parent;
    if (parent) {
        o->addr_format = parent->addr_format;
        o->ep_type = parent->ep_type;
        memcpy(o->prov, parent->prov, sizeof(o->prov));
    }
    pthread_mutex_unlock(&fi_lock);
    fi_sync(o);
    return o;
}

void fi_release(struct fi_obj *o)
{
    pthread_mutex_lock(&fi_lock);
    if (o->obj)
        fi_unhook(o);
    pthread_mutex_unlock(&fi_lock);
}

void fi_forget(struct fi_obj *o)
{
    __atomic_store_n(&o->obj, NULL, __ATOMIC_RELEASE);
}

/* Tracing stops: every object we pointed at a copy gets its own tables back.  A thread already
 * inside a hook finishes through the record. */
static void fi_restore_all(int reason, void *arg)
{
    (void)reason;
    (void)arg;
    if (!fi_arena)
        return;
    pthread_mutex_lock(&fi_lock);
    for (uint32_t i = 0; i < fi_nobj; i++)
        if (fi_rec(i)->obj)
            fi_unhook(fi_rec(i));
    pthread_mutex_unlock(&fi_lock);
}

__attribute__((constructor)) static void fi_register_stop(void) { st_on_stop(fi_restore_all, NULL); }

_Static_assert(sizeof(struct fi_obj) <= FI_OBJ_BYTES, "an object record must fit its slot of the region");
