/* The table of send queues a program's CPU threads write themselves (cpu_sq.h readers,
 * cpu_sq_table.h writers).  Filled from DevX CREATE_QP (devx_state.c) and mlx5dv_init_obj
 * (cpu_dv.c); read without a lock by anyone who wants a queue's producer index. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cpu_sq_table.h"
#include "cpu_uar.h"
#include "db_env.h"
#include "wqe_parse.h"

#define HINTS 1024

struct ent {
    struct cpu_sq_info info;
    volatile uint32_t alive;
    struct db_page *volatile page; /* the page of ours its doorbells go to (cpu_uar.c), or NULL */
};

static struct ent g_tab[CPU_SQ_MAX];
uint32_t cpu_sq_published;           /* entries published (release); cpu_sq.h */
static uint16_t g_hint[HINTS];       /* qpn % HINTS -> newest index + 1 */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static int matches(const struct ent *e, uint32_t qpn)
{
    return e->info.qpn == qpn && __atomic_load_n(&e->alive, __ATOMIC_ACQUIRE);
}

/* The live entry of `qpn`: the hinted one, else the newest that matches; NULL if none. */
static const struct ent *lookup(uint32_t qpn)
{
    uint32_t n = __atomic_load_n(&cpu_sq_published, __ATOMIC_ACQUIRE);
    uint32_t h = __atomic_load_n(&g_hint[qpn % HINTS], __ATOMIC_RELAXED);
    if (h && h <= n && matches(&g_tab[h - 1], qpn))
        return &g_tab[h - 1];
    for (uint32_t i = n; i-- > 0;)
        if (matches(&g_tab[i], qpn))
            return &g_tab[i];
    return NULL;
}

static uint16_t read_pi(const struct ent *e)
{
    const volatile uint32_t *send = (const volatile uint32_t *)(uintptr_t)(e->info.dbr_addr + 4);
    return (uint16_t)__builtin_bswap32(__atomic_load_n(send, __ATOMIC_ACQUIRE));
}

int cpu_sq_pi(uint32_t qpn, uint16_t *pi)
{
    const struct ent *e = lookup(qpn);
    if (!e || !e->info.dbr_addr)
        return -1;
    *pi = read_pi(e);
    return 0;
}

#define NOT_OURS ((struct db_page *)1) /* the queue's register is not one of our pages */

int cpu_sq_ring_now(uint32_t qpn)
{
    struct ent *e = (struct ent *)lookup(qpn);
    if (!e)
        return 0;
    struct db_page *pg = __atomic_load_n(&e->page, __ATOMIC_ACQUIRE);
    if (!pg) { /* a DevX queue: its page is found by its register, once */
        pg = e->info.bf_reg ? cpu_uar_page_of(e->info.bf_reg) : NULL;
        __atomic_store_n(&e->page, pg ? pg : NOT_OURS, __ATOMIC_RELEASE);
    }
    return pg && pg != NOT_OURS ? db_cpu_page_service(pg) : 0;
}

void cpu_sq_bind_page(uint32_t qpn, uint64_t sq_addr, struct db_page *pg)
{
    pthread_mutex_lock(&g_lock);
    for (uint32_t i = cpu_sq_published; i-- > 0;)
        if (g_tab[i].alive && g_tab[i].info.qpn == qpn && g_tab[i].info.sq_addr == sq_addr) {
            __atomic_store_n(&g_tab[i].page, pg, __ATOMIC_RELEASE);
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

int cpu_sq_snapshot(struct cpu_sq_view *out, int max)
{
    uint32_t n = __atomic_load_n(&cpu_sq_published, __ATOMIC_ACQUIRE);
    int k = 0;
    for (uint32_t i = 0; i < n && k < max; i++) {
        const struct ent *e = &g_tab[i];
        if (!__atomic_load_n(&e->alive, __ATOMIC_ACQUIRE) || !e->info.dbr_addr)
            continue;
        out[k].qpn = e->info.qpn;
        out[k].pi = read_pi(e);
        k++;
    }
    return k;
}

int cpu_sq_add(const struct cpu_sq_info *in)
{
    static int full_said;
    int idx = -1;
    pthread_mutex_lock(&g_lock);
    /* the same queue told again (mlx5dv_init_obj may be called more than once): refresh it */
    for (uint32_t i = cpu_sq_published; i-- > 0;) {
        struct ent *e = &g_tab[i];
        if (e->alive && e->info.qpn == in->qpn && e->info.sq_addr == in->sq_addr) {
            if (in->bf_reg) {
                e->info.bf_reg = in->bf_reg;
                e->info.bf_size = in->bf_size;
            }
            idx = (int)i;
            break;
        }
    }
    if (idx < 0 && cpu_sq_published < CPU_SQ_MAX) {
        /* an older entry of the same qpn (destroyed, number reused) stops matching first */
        for (uint32_t i = cpu_sq_published; i-- > 0;)
            if (g_tab[i].info.qpn == in->qpn)
                __atomic_store_n(&g_tab[i].alive, 0, __ATOMIC_RELEASE);
        idx = (int)cpu_sq_published;
        g_tab[idx].info = *in;
        __atomic_store_n(&g_tab[idx].alive, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&cpu_sq_published, cpu_sq_published + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&g_hint[in->qpn % HINTS], (uint16_t)(idx + 1), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_lock);
    if (idx < 0) {
        if (!full_said++)
            db_error("cpu_sq", "more than %d CPU-written send queues: qp 0x%x and later ones are not tracked", CPU_SQ_MAX,
                     in->qpn);
        return -1;
    }
    db_live_qp(in->qpn, ST_QPF_CPU_SQ);
    db_cold("\"ev\":\"cpu_sq\",\"qpn\":%u,\"source\":\"%s\",\"st\":\"%s\",\"sq_addr\":%" PRIu64 ",\"sq_slots\":%u"
            ",\"dbr_addr\":%" PRIu64 ",\"bf_reg\":%" PRIu64 ",\"bf_size\":%u",
            in->qpn, in->source == CPU_SQ_DEVX ? "devx" : "init_obj", mlx5_st_name(in->st), in->sq_addr, in->slots, in->dbr_addr,
            in->bf_reg, in->bf_size);
    return idx;
}

void cpu_sq_forget(uint32_t qpn)
{
    int known = 0;
    uint16_t pi = 0;
    pthread_mutex_lock(&g_lock);
    const struct ent *e = lookup(qpn);
    if (e && e->info.dbr_addr) { /* the record is still the program's: its queue is being destroyed */
        known = 1;
        pi = read_pi(e);
    }
    for (uint32_t i = cpu_sq_published; i-- > 0;)
        if (g_tab[i].info.qpn == qpn)
            __atomic_store_n(&g_tab[i].alive, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_lock);
    cpu_uar_qp_gone(qpn);
    if (known) /* where its producer stood last */
        db_cold("\"ev\":\"cpu_sq_gone\",\"qpn\":%u,\"pi\":%u", qpn, (unsigned)pi);
}

int cpu_sq_find(uint32_t qpn, struct cpu_sq_info *out)
{
    pthread_mutex_lock(&g_lock);
    const struct ent *e = lookup(qpn);
    if (e)
        *out = e->info;
    pthread_mutex_unlock(&g_lock);
    return e ? 0 : -1;
}

/* The session's end: where each queue's producer stood (what a reader of the table saw last). */
static void on_stop(int reason, void *arg)
{
    (void)reason;
    (void)arg;
    struct cpu_sq_view v[64];
    int n = cpu_sq_snapshot(v, 64);
    if (!n)
        return;
    char buf[64 * 32] = "";
    size_t at = 0;
    for (int i = 0; i < n && at < sizeof(buf); i++)
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s{\"qpn\":%u,\"pi\":%u}", i ? "," : "", v[i].qpn,
                               (unsigned)v[i].pi);
    db_cold("\"ev\":\"cpu_sq_end\",\"queues\":[%s]", buf);
}

__attribute__((constructor)) static void cpu_sq_register(void) { db_on_stop(on_stop, NULL); }
