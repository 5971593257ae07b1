/* Doorbell pages of CPU producers (docs/cpu-wqes.md): a program that writes its own WQEs gets,
 * in place of a UAR page, a page of ours that a repeater watches.  Each control word it stores
 * into a BlueFlame half there is accounted (the WQEs it announces read from the send queue and
 * recorded) and then forwarded to the real register, so the NIC never sees a WQE before we read
 * it.  The pointers are swapped where the program learns them: mlx5dv_devx_alloc_uar's
 * reg_addr / base_addr (devx_state.c) and mlx5dv_init_obj's bf.reg (cpu_dv.c). */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cpu_uar.h"
#include "cuda_driver.h"
#include "db_env.h"

#define MAX_PAGES 1024
#define MAX_QPS 4096

struct page_ent {
    uint64_t real;          /* the UAR page */
    uint8_t *fake;          /* ours, handed to the program */
    struct db_page *pg;
};
static struct page_ent g_pages[MAX_PAGES];
static int g_n_pages;
static struct db_qp *g_qps[MAX_QPS]; /* queues made here (mlx5dv_init_obj), for their destroy */
static int g_n_qps;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

int cpu_uar_enabled(void) { return db_recording() && db_doorbell_mode() != ST_DB_OFF; }

/* The entry of the page holding ADDR: the UAR page, or (WITH_FAKE) ours.  Lock held. */
static struct page_ent *entry_of(uint64_t addr, int with_fake)
{
    for (int i = 0; i < g_n_pages; i++)
        if (g_pages[i].real == (addr & ~4095ull) ||
            (with_fake && (uint64_t)(uintptr_t)g_pages[i].fake == (addr & ~4095ull)))
            return &g_pages[i];
    return NULL;
}

/* The entry standing in for UAR page `real`, made on first need; NULL if none can be.  Lock held. */
static struct page_ent *page_for(uint64_t real)
{
    struct page_ent *known = entry_of(real, 0);
    if (known)
        return known;
    if (g_n_pages == MAX_PAGES) {
        db_error("cpu_uar", "more than %d doorbell pages of CPU producers: UAR page %" PRIu64 " is not watched", MAX_PAGES,
                 real);
        return NULL;
    }
    /* shared: a child the program forks without exec stores where our repeater still looks */
    void *fake = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (fake == MAP_FAILED) {
        db_error("cpu_uar", "no memory for a doorbell page: UAR page %" PRIu64 " is not watched", real);
        return NULL;
    }
    struct db_params p;
    db_params_load(&p, db_doorbell_mode());
    struct db_page *pg = db_cpu_page_start(&p, fake, (volatile void *)(uintptr_t)real);
    if (!pg) {
        munmap(fake, 4096);
        return NULL;
    }
    db_flush_at_each_stop(); /* account what was recovered at the session's end */
    pg->live->fake_host = (uint64_t)(uintptr_t)fake;
    struct page_ent *e = &g_pages[g_n_pages++];
    e->real = real;
    e->fake = fake;
    e->pg = pg;
    db_cold("\"ev\":\"repeater_start\",\"repeater\":%d,\"uar_reg_addr\":%" PRIu64 ",\"fake_host\":%" PRIu64
            ",\"cpu\":%d,\"mode\":\"%s\",\"producer\":\"cpu\"",
            pg->index, real, (uint64_t)(uintptr_t)fake, pg->thread ? pg->live->cpu : -1,
            p.mode == ST_DB_WQE ? "wqe" : "forward");
    return e;
}

struct db_page *cpu_uar_substitute(uint64_t reg, uint32_t half, uint64_t *fake_reg)
{
    uint64_t real = reg & ~4095ull, off = reg & 4095;
    pthread_mutex_lock(&g_lock);
    struct page_ent *e = page_for(real);
    struct db_page *pg = NULL;
    /* a producer alternates the register's two halves (BlueFlame); a doorbell-only one uses one */
    if (e && db_cpu_page_watch(e->pg, (uint32_t)off) == 0 && (!half || db_cpu_page_watch(e->pg, (uint32_t)(off ^ half)) == 0)) {
        pg = e->pg;
        *fake_reg = (uint64_t)(uintptr_t)e->fake + off;
    }
    pthread_mutex_unlock(&g_lock);
    return pg;
}

struct db_page *cpu_uar_page_of(uint64_t reg)
{
    pthread_mutex_lock(&g_lock);
    struct page_ent *e = entry_of(reg, 1);
    struct db_page *pg = e ? e->pg : NULL;
    pthread_mutex_unlock(&g_lock);
    return pg;
}

uint64_t cpu_uar_fake_of(uint64_t addr)
{
    pthread_mutex_lock(&g_lock);
    struct page_ent *e = entry_of(addr, 0);
    uint64_t out = e ? (uint64_t)(uintptr_t)e->fake + (addr & 4095) : 0;
    pthread_mutex_unlock(&g_lock);
    return out;
}

void cpu_uar_add_qp(struct db_page *pg, const struct cpu_sq_info *sq, uint16_t pi_now)
{
    struct db_qp *q = NULL;
    pthread_mutex_lock(&g_lock);
    for (int i = g_n_qps; i-- > 0;)
        if (g_qps[i]->qpn == sq->qpn && !g_qps[i]->dead && g_qps[i]->sq_addr == sq->sq_addr) {
            q = g_qps[i]; /* mlx5dv_init_obj again for the same queue */
            break;
        }
    if (!q && g_n_qps < MAX_QPS && (q = calloc(1, sizeof(*q)))) {
        q->qpn = sq->qpn;
        q->st = sq->st;
        q->slots = sq->slots;
        q->sq_addr = sq->sq_addr;
        q->sq_mem = DB_MEM_HOST;
        q->gpu = -1;
        q->dbr_addr = sq->dbr_addr;
        q->dbr_mem = DB_MEM_HOST;
        q->repeater = -1;
        /* the program may have posted through verbs before: recovery starts where it stands */
        q->have_pi = 1;
        q->pi = pi_now;
        q->live = db_live_qp(sq->qpn, ST_QPF_VERBS | ST_QPF_CPU_SQ);
        if (!q->live)
            q->live = &q->priv;
        q->live->qpn = sq->qpn;
        q->live->sq_slots = sq->slots;
        q->live->gpu = -1;
        q->live->pi = pi_now;
        q->live->wqe_pi = pi_now;
        g_qps[g_n_qps++] = q;
    } else if (!q) {
        db_error("cpu_uar", "no room to track qp 0x%x: its doorbells are forwarded, its WQEs not recorded", sq->qpn);
    }
    if (q && q->repeater < 0)
        db_page_add_qp(pg, q);
    pthread_mutex_unlock(&g_lock);
    if (q)
        cpu_sq_bind_page(sq->qpn, sq->sq_addr, pg);
}

void cpu_uar_qp_gone(uint32_t qpn)
{
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_n_qps; i++)
        if (g_qps[i]->qpn == qpn)
            g_qps[i]->dead = 1; /* its repeater drains and retires it */
    pthread_mutex_unlock(&g_lock);
}

void cpu_uar_gpu_context(struct db_page *pg)
{
    CUcontext ctx = NULL;
    if (pg->cuctx || !cuda_drv_ready() || !cu_drv.CtxGetCurrent || cu_drv.CtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return;
    if (ctx)
        db_page_set_cuctx(pg, ctx);
    else
        db_error("cpu_uar", "repeater %d: no current CUDA context where a queue in GPU memory joined it: its WQEs cannot be copied",
                 pg->index);
}
