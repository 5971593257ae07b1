/* devx state: UARs, umems and the QP / CQ objects a program creates through mlx5dv devx, read
 * from the calls' arguments, results and PRM command mailboxes (fields: sigmatrace/mlx5_prm.h;
 * the formats explained in docs/mlx5-formats.md). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>
#include <sigmatrace/mlx5_prm.h>

#include "cpu_sq_table.h"
#include "cpu_uar.h"
#include "devx_state.h"

/* Mailbox lengths below which a field we read would lie outside: an INIT2RTR mailbox is read
 * through the primary path's remote GID, an object's id ends the output's third dword. */
#define MODIFY_PATH_END (PRM_QPC_PAP_RGID_BYTE + 16)
#define OUT_ID_END ((PRM_OFF(PRM_QP_OUT_QPN) + PRM_BITS(PRM_QP_OUT_QPN)) / 8)

/* Each BlueFlame register of a UAR page has two halves of this many bytes, which a producer
 * alternates (log_bf_reg_size 9: 512-byte registers). */
#define DEVX_BF_HALF 256

enum obj_kind { OBJ_OTHER = 0, OBJ_QP = 1, OBJ_CQ = 2 };

struct uar_ent {
    void *uar, *ctx;
    uint64_t reg_addr, base_addr;
    uint32_t page_id, flags;
    int alive, preexisting;
    struct db_page *page;
    uint64_t fake_host, fake_dptr;
    struct db_page *cpu_page; /* the program's CPU threads ring our page (cpu_uar.c), or NULL */
    uint64_t cpu_fake;        /* that page */
};
struct umem_ent {
    void *umem, *ctx;
    uint32_t id, access;
    uint64_t addr, size;
    int mem, gpu, alive;
};
struct obj_ent {
    void *obj, *ctx;
    int kind, alive;
    uint32_t id; /* qpn / cqn */
    struct db_qp *qp;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uar_ent *g_uars;
static size_t g_n_uars, g_cap_uars;
static struct umem_ent *g_umems;
static size_t g_n_umems, g_cap_umems;
static struct obj_ent *g_objs;
static size_t g_n_objs, g_cap_objs;

void devx_lock(void) { pthread_mutex_lock(&g_lock); }
void devx_unlock(void) { pthread_mutex_unlock(&g_lock); }

/* Append to a growable table; NULL (counted) when memory ran out. */
static void *grow(void **tab, size_t *n, size_t *cap, size_t elem)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        void *t = realloc(*tab, nc * elem);
        if (!t) {
            db_error("devx", "out of memory for the devx tables");
            return NULL;
        }
        *tab = t;
        *cap = nc;
    }
    void *e = (char *)*tab + (*n)++ * elem;
    memset(e, 0, elem);
    return e;
}

static const char *mem_name(int mem) { return mem == DB_MEM_GPU ? "gpu" : mem == DB_MEM_HOST ? "host" : "unknown"; }

/* ---- UARs ---------------------------------------------------------------------------------- */

static struct uar_ent *uar_by_ptr(void *uar)
{
    for (size_t i = g_n_uars; i-- > 0;)
        if (g_uars[i].uar == uar && g_uars[i].alive)
            return &g_uars[i];
    return NULL;
}

int devx_uar_find(uint64_t addr, uint64_t len, struct devx_uar_view *out)
{
    for (size_t i = g_n_uars; i-- > 0;) {
        struct uar_ent *u = &g_uars[i];
        uint64_t page = u->reg_addr & ~4095ull;
        /* the program holds our page in place of the UAR's when its CPU threads ring it */
        if (u->alive && u->cpu_fake && addr + (len ? len : 1) > u->cpu_fake && addr < u->cpu_fake + 4096)
            page = u->cpu_fake;
        if (!u->alive || addr + (len ? len : 1) <= page || addr >= page + 4096)
            continue;
        out->reg_addr = u->reg_addr;
        out->page = page;
        out->page_id = u->page_id;
        out->index = (int)i;
        out->repeater = u->page;
        out->fake_host = u->fake_host;
        out->fake_dptr = u->fake_dptr;
        out->cpu_page = u->cpu_page;
        return (int)i;
    }
    return -1;
}

static void attach_qp(struct db_page *pg, struct db_qp *q)
{
    if (q->repeater >= 0 || q->dead)
        return;
    db_page_add_qp(pg, q);
}

void devx_uar_substituted(int index, struct db_page *pg, uint64_t fake_host, uint64_t fake_dptr)
{
    struct uar_ent *u = &g_uars[index];
    u->page = pg;
    u->fake_host = fake_host;
    u->fake_dptr = fake_dptr;
    for (size_t i = 0; i < g_n_objs; i++) {
        struct obj_ent *o = &g_objs[i];
        if (o->alive && o->kind == OBJ_QP && o->qp && o->qp->uar_page == u->page_id && o->ctx == u->ctx)
            attach_qp(pg, o->qp);
    }
}

DB_EXPORT void st_devx_uar_alloc(void *ctx, uint32_t flags, void *uar, uint64_t ts)
{
    if (!uar) {
        db_cold_at(ts, "\"ev\":\"devx_uar_alloc\",\"fn\":\"mlx5dv_devx_alloc_uar\",\"ctx\":%" PRIu64 ",\"flags\":%u,\"uar\":0,\"ret\":0",
                   (uint64_t)(uintptr_t)ctx, flags);
        return;
    }
    struct mlx5dv_devx_uar *x = uar;
    uint64_t real_reg = (uint64_t)(uintptr_t)x->reg_addr, real_base = (uint64_t)(uintptr_t)x->base_addr, fake_reg = 0;
    /* Whoever rings this UAR rings a page of ours: swapped before the program reads it.  Also in
     * a process with the CUDA driver: a host thread may ring the page (NVSHMEM's CPU proxy), and
     * a GPU it is handed to (cuMemHostRegister, cuMemHostGetDevicePointer) gets the same page
     * mapped, so one repeater sees both (cuda_subst.c) */
    struct db_page *cpu_page = cpu_uar_enabled() ? cpu_uar_substitute(real_reg, DEVX_BF_HALF, &fake_reg) : NULL;
    if (cpu_page) {
        x->reg_addr = (void *)(uintptr_t)fake_reg;
        if ((real_base & ~4095ull) == (real_reg & ~4095ull))
            x->base_addr = (void *)(uintptr_t)((fake_reg & ~4095ull) + (real_base & 4095));
    }
    devx_lock();
    struct uar_ent *u = grow((void **)&g_uars, &g_n_uars, &g_cap_uars, sizeof(*u));
    if (u) {
        u->uar = uar;
        u->ctx = ctx;
        u->reg_addr = real_reg;
        u->base_addr = real_base;
        u->cpu_page = cpu_page;
        u->cpu_fake = cpu_page ? fake_reg & ~4095ull : 0;
        u->page_id = x->page_id;
        u->flags = flags;
        u->alive = 1;
    }
    devx_unlock();
    db_cold_at(ts, "\"ev\":\"devx_uar_alloc\",\"fn\":\"mlx5dv_devx_alloc_uar\",\"ctx\":%" PRIu64 ",\"uar\":%" PRIu64
               ",\"reg_addr\":%" PRIu64 ",\"base_addr\":%" PRIu64 ",\"page_id\":%u,\"flags\":%u,\"cpu_repeater\":%d,\"ret\":%" PRIu64,
               (uint64_t)(uintptr_t)ctx, (uint64_t)(uintptr_t)uar, real_reg, real_base, x->page_id, flags,
               cpu_page ? cpu_page->index : -1, (uint64_t)(uintptr_t)uar);
}

/* Before the register goes away: its repeater forwards what is pending and stops for good. */
DB_EXPORT void st_devx_uar_free_enter(void *uar)
{
    devx_lock();
    struct uar_ent *u = uar_by_ptr(uar);
    struct db_page *pages[2] = {u ? u->page : NULL, u ? u->cpu_page : NULL};
    devx_unlock();
    for (int i = 0; i < 2; i++)
        if (pages[i] && db_page_stop(pages[i], 1000) == 0)
            db_cold("\"ev\":\"repeater_stop\",\"repeater\":%d,\"uar_reg_addr\":%" PRIu64 ",\"why\":\"uar freed\"",
                    pages[i]->index, (uint64_t)(uintptr_t)pages[i]->target);
}

DB_EXPORT void st_devx_uar_free(void *uar, uint64_t ts)
{
    devx_lock();
    struct uar_ent *u = uar_by_ptr(uar);
    uint64_t reg = 0, base = 0;
    uint32_t page_id = 0, flags = 0;
    void *ctx = NULL;
    if (u) {
        u->alive = 0;
        reg = u->reg_addr;
        base = u->base_addr;
        page_id = u->page_id;
        flags = u->flags;
        ctx = u->ctx;
    }
    devx_unlock();
    db_cold_at(ts, "\"ev\":\"devx_uar_free\",\"fn\":\"mlx5dv_devx_free_uar\",\"ctx\":%" PRIu64 ",\"uar\":%" PRIu64
               ",\"reg_addr\":%" PRIu64 ",\"base_addr\":%" PRIu64 ",\"page_id\":%u,\"flags\":%u",
               (uint64_t)(uintptr_t)ctx, (uint64_t)(uintptr_t)uar, reg, base, page_id, flags);
}

/* ---- umems ---------------------------------------------------------------------------------- */

static struct umem_ent *umem_by_id(void *ctx, uint32_t id)
{
    for (size_t i = g_n_umems; i-- > 0;)
        if (g_umems[i].alive && g_umems[i].id == id && (!ctx || g_umems[i].ctx == ctx))
            return &g_umems[i];
    return NULL;
}

static void umem_reg(void *ctx, void *addr, uint64_t size, uint32_t access, void *umem, uint64_t ts, const char *fn)
{
    int gpu = -1, mem = DB_MEM_HOST;
    uint32_t id = 0;
    if (umem) {
        id = ((const struct mlx5dv_devx_umem *)umem)->umem_id;
        mem = db_mem_of((uint64_t)(uintptr_t)addr, &gpu);
        devx_lock();
        struct umem_ent *e = grow((void **)&g_umems, &g_n_umems, &g_cap_umems, sizeof(*e));
        if (e) {
            e->umem = umem;
            e->ctx = ctx;
            e->id = id;
            e->access = access;
            e->addr = (uint64_t)(uintptr_t)addr;
            e->size = size;
            e->mem = mem;
            e->gpu = gpu;
            e->alive = 1;
        }
        devx_unlock();
    }
    db_cold_at(ts, "\"ev\":\"devx_umem_reg\",\"fn\":\"%s\",\"ctx\":%" PRIu64 ",\"umem\":%" PRIu64 ",\"umem_id\":%u,\"addr\":%" PRIu64
               ",\"size\":%" PRIu64 ",\"access\":%u,\"mem\":\"%s\",\"gpu\":%d,\"ret\":%" PRIu64,
               fn, (uint64_t)(uintptr_t)ctx, (uint64_t)(uintptr_t)umem, id, (uint64_t)(uintptr_t)addr, size, access,
               mem_name(mem), gpu, (uint64_t)(uintptr_t)umem);
}

DB_EXPORT void st_devx_umem_reg(void *ctx, void *addr, uint64_t size, uint32_t access, void *umem, uint64_t ts)
{
    umem_reg(ctx, addr, size, access, umem, ts, "mlx5dv_devx_umem_reg");
}

DB_EXPORT void st_devx_umem_reg_ex(void *ctx, const void *umem_in, void *umem, uint64_t ts)
{
    const struct mlx5dv_devx_umem_in *in = umem_in;
    umem_reg(ctx, in ? in->addr : NULL, in ? in->size : 0, in ? in->access : 0, umem, ts, "mlx5dv_devx_umem_reg_ex");
}

DB_EXPORT void st_devx_umem_dereg(void *umem, int ret, uint64_t ts)
{
    struct umem_ent copy = {0};
    devx_lock();
    for (size_t i = g_n_umems; i-- > 0;)
        if (g_umems[i].alive && g_umems[i].umem == umem) {
            if (ret == 0)
                g_umems[i].alive = 0;
            copy = g_umems[i];
            break;
        }
    devx_unlock();
    db_cold_at(ts, "\"ev\":\"devx_umem_dereg\",\"fn\":\"mlx5dv_devx_umem_dereg\",\"ctx\":%" PRIu64 ",\"umem\":%" PRIu64
               ",\"umem_id\":%u,\"addr\":%" PRIu64 ",\"size\":%" PRIu64 ",\"access\":%u,\"mem\":\"%s\",\"gpu\":%d,\"ret\":%d",
               (uint64_t)(uintptr_t)copy.ctx, (uint64_t)(uintptr_t)umem, copy.id, copy.addr, copy.size, copy.access,
               mem_name(copy.umem ? copy.mem : DB_MEM_UNKNOWN), copy.umem ? copy.gpu : -1, ret);
}

/* ---- objects -------------------------------------------------------------------------------- */

static struct obj_ent *obj_by_ptr(void *obj)
{
    for (size_t i = g_n_objs; i-- > 0;)
        if (g_objs[i].alive && g_objs[i].obj == obj)
            return &g_objs[i];
    return NULL;
}

static void create_qp(void *ctx, const uint8_t *in, uint32_t qpn, void *obj, uint64_t ts)
{
    uint32_t log_sq = prm_get(in, PRM_QPC_LOG_SQ_SIZE), log_rq = prm_get(in, PRM_QPC_LOG_RQ_SIZE);
    uint32_t rq_stride = prm_get(in, PRM_QPC_LOG_RQ_STRIDE), rq_type = prm_get(in, PRM_QPC_RQ_TYPE);
    int no_sq = (int)prm_get(in, PRM_QPC_NO_SQ);
    int st = (int)prm_get(in, PRM_QPC_ST);
    uint32_t pd = prm_get(in, PRM_QPC_PD), uar_page = prm_get(in, PRM_QPC_UAR_PAGE);
    uint32_t cqn_snd = prm_get(in, PRM_QPC_CQN_SND), cqn_rcv = prm_get(in, PRM_QPC_CQN_RCV);
    uint64_t dbr_addr = prm_get64(in, PRM_QPC_DBR_ADDR), wq_off = prm_get64(in, PRM_QP_IN_WQ_UMEM_OFFSET);
    int dbr_valid = (int)prm_get(in, PRM_QPC_DBR_UMEM_VALID), wq_valid = (int)prm_get(in, PRM_QP_IN_WQ_UMEM_VALID);
    uint32_t dbr_umem = prm_get(in, PRM_QPC_DBR_UMEM_ID), wq_umem = prm_get(in, PRM_QP_IN_WQ_UMEM_ID);
    /* the send queue follows the receive queue in the work-queue buffer */
    uint64_t rq_bytes = rq_type == PRM_RQ_REGULAR ? ((uint64_t)1 << log_rq) * ((uint64_t)16 << rq_stride) : 0;

    struct db_qp *q = calloc(1, sizeof(*q));
    if (!q) {
        db_error("devx", "out of memory for qp 0x%x", qpn);
        return;
    }
    q->qpn = qpn;
    q->st = st;
    q->uar_page = uar_page;
    q->known_start = 1; /* a new QP's send queue starts at block 0 */
    q->repeater = -1;
    q->gpu = -1;
    q->sq_mem = DB_MEM_UNKNOWN;
    q->dbr_mem = DB_MEM_UNKNOWN;
    devx_lock();
    /* a umem id without its valid bit is still the NIC's to use (UCX 1.13 sets the ids only) */
    struct umem_ent *u = wq_valid || wq_umem ? umem_by_id(ctx, wq_umem) : NULL;
    if (u && !no_sq) {
        q->sq_addr = u->addr + wq_off + rq_bytes;
        q->slots = 1u << log_sq;
        q->sq_mem = u->mem;
        q->gpu = u->gpu;
        if (q->sq_addr + ((uint64_t)q->slots << 6) > u->addr + u->size) {
            db_error("devx", "qp 0x%x: send queue of %u blocks at offset %" PRIu64 " does not fit umem %u of %" PRIu64 " bytes",
                     qpn, q->slots, q->sq_addr - u->addr, wq_umem, u->size);
            q->slots = 0;
        }
    }
    struct umem_ent *du = dbr_valid || dbr_umem ? umem_by_id(ctx, dbr_umem) : NULL;
    uint64_t dbr_loc = du ? du->addr + dbr_addr : dbr_addr;
    /* the record, where we can read it (a umem we saw; otherwise dbr_addr is the NIC's address) */
    if (du && dbr_addr + 8 <= du->size) {
        q->dbr_addr = dbr_loc;
        q->dbr_mem = du->mem;
    }
    q->live = db_live_qp(qpn, ST_QPF_DEVX | (q->sq_mem == DB_MEM_GPU ? ST_QPF_GPU_SQ : 0));
    if (!q->live)
        q->live = &q->priv;
    q->live->qpn = qpn;
    q->live->sq_slots = q->slots;
    q->live->gpu = q->gpu;
    struct obj_ent *o = grow((void **)&g_objs, &g_n_objs, &g_cap_objs, sizeof(*o));
    if (o) {
        o->obj = obj;
        o->ctx = ctx;
        o->kind = OBJ_QP;
        o->id = qpn;
        o->qp = q;
        o->alive = 1;
    }
    /* a QP made after its UAR was substituted goes straight to that repeater: the page of ours
     * the program holds in place of its UAR, whether its send queue is in host memory (written
     * by CPU threads) or in GPU memory (recovered with the page's CUDA copies, in the context
     * current now: the program's, which made the queue) */
    for (size_t i = g_n_uars; i-- > 0;)
        if (g_uars[i].alive && g_uars[i].page_id == uar_page && g_uars[i].ctx == ctx) {
            if (g_uars[i].cpu_page && q->slots && (q->sq_mem == DB_MEM_HOST || q->sq_mem == DB_MEM_GPU)) {
                if (q->sq_mem == DB_MEM_HOST)
                    q->live->flags |= ST_QPF_CPU_SQ;
                else
                    cpu_uar_gpu_context(g_uars[i].cpu_page);
                attach_qp(g_uars[i].cpu_page, q);
            } else if (g_uars[i].page) {
                attach_qp(g_uars[i].page, q);
            }
            break;
        }
    /* a send queue in host memory is the program's CPU threads' to write (cpu_sq.h) */
    struct cpu_sq_info cs = {.qpn = qpn, .st = st, .source = CPU_SQ_DEVX, .ctx = ctx, .sq_addr = q->sq_addr,
                             .slots = q->slots, .dbr_addr = q->dbr_mem == DB_MEM_HOST ? q->dbr_addr : 0,
                             .bf_size = DEVX_BF_HALF};
    for (size_t i = g_n_uars; i-- > 0;)
        if (g_uars[i].alive && g_uars[i].page_id == uar_page && g_uars[i].ctx == ctx) {
            cs.bf_reg = g_uars[i].reg_addr;
            break;
        }
    devx_unlock();
    if (q->slots && q->sq_mem == DB_MEM_HOST && cs.dbr_addr)
        cpu_sq_add(&cs);
    if (!u && !no_sq)
        db_error("devx", "qp 0x%x: its send queue is not in a umem we saw registered (wq_umem_valid %d, id %u): its WQEs cannot be recovered",
                 qpn, wq_valid, wq_umem);
    db_cold_at(ts, "\"ev\":\"devx_qp_create\",\"fn\":\"mlx5dv_devx_obj_create\",\"obj\":%" PRIu64 ",\"qpn\":%u,\"st\":\"%s\",\"pd\":%u"
               ",\"log_sq_size\":%u,\"sq_slots\":%u,\"sq_addr\":%" PRIu64 ",\"sq_umem_id\":%u,\"sq_umem_offset\":%" PRIu64
               ",\"rq_bytes\":%" PRIu64 ",\"dbr_addr\":%" PRIu64 ",\"dbr_umem_id\":%u,\"uar_page\":%u,\"cqn_snd\":%u"
               ",\"cqn_rcv\":%u,\"mem\":\"%s\",\"gpu\":%d,\"ret\":%" PRIu64,
               (uint64_t)(uintptr_t)obj, qpn, mlx5_st_name(st), pd, log_sq, q->slots, q->sq_addr, wq_umem, wq_off, rq_bytes,
               dbr_loc, du ? dbr_umem : 0, uar_page, cqn_snd, cqn_rcv, mem_name(q->sq_mem), q->gpu,
               (uint64_t)(uintptr_t)obj);
}

static void create_cq(void *ctx, const uint8_t *in, uint32_t cqn, void *obj, uint64_t ts)
{
    uint32_t log_cq = prm_get(in, PRM_CQ_IN_LOG_CQ_SIZE), uar_page = prm_get(in, PRM_CQ_IN_UAR_PAGE);
    uint32_t umem_id = prm_get(in, PRM_CQ_IN_CQ_UMEM_ID);
    int valid = (int)prm_get(in, PRM_CQ_IN_CQ_UMEM_VALID);
    uint64_t off = prm_get64(in, PRM_CQ_IN_CQ_UMEM_OFFSET), addr = 0;
    devx_lock();
    struct umem_ent *u = valid ? umem_by_id(ctx, umem_id) : NULL;
    if (u)
        addr = u->addr + off;
    struct obj_ent *o = grow((void **)&g_objs, &g_n_objs, &g_cap_objs, sizeof(*o));
    if (o) {
        o->obj = obj;
        o->ctx = ctx;
        o->kind = OBJ_CQ;
        o->id = cqn;
        o->alive = 1;
    }
    int mem = u ? u->mem : DB_MEM_UNKNOWN;
    devx_unlock();
    db_cold_at(ts, "\"ev\":\"devx_cq_create\",\"fn\":\"mlx5dv_devx_obj_create\",\"obj\":%" PRIu64 ",\"cqn\":%u,\"log_cq_size\":%u"
               ",\"cq_addr\":%" PRIu64 ",\"cq_umem_id\":%u,\"uar_page\":%u,\"mem\":\"%s\",\"ret\":%" PRIu64,
               (uint64_t)(uintptr_t)obj, cqn, log_cq, addr, valid ? umem_id : 0, uar_page, mem_name(mem),
               (uint64_t)(uintptr_t)obj);
}

DB_EXPORT void st_devx_obj_create(void *ctx, const void *in, uint64_t inlen, const void *out, uint64_t outlen,
                                  void *obj, uint64_t ts)
{
    if (!in || inlen < 8)
        return;
    uint32_t opcode = prm_get(in, PRM_IN_OPCODE);
    int ok = obj && out && outlen >= OUT_ID_END && prm_get(out, PRM_OUT_STATUS) == PRM_STAT_OK;
    if (opcode == PRM_CMD_CREATE_QP && inlen >= PRM_CREATE_QP_IN_BYTES) {
        if (ok)
            create_qp(ctx, in, prm_get(out, PRM_QP_OUT_QPN), obj, ts);
        else
            db_cold_at(ts, "\"ev\":\"devx_qp_create\",\"fn\":\"mlx5dv_devx_obj_create\",\"obj\":0,\"qpn\":0,\"ret\":0");
    } else if (opcode == PRM_CMD_CREATE_CQ && inlen >= PRM_CREATE_CQ_IN_MIN_BYTES) {
        if (ok)
            create_cq(ctx, in, prm_get(out, PRM_CQ_OUT_CQN), obj, ts);
        else
            db_cold_at(ts, "\"ev\":\"devx_cq_create\",\"fn\":\"mlx5dv_devx_obj_create\",\"obj\":0,\"cqn\":0,\"ret\":0");
    } else if (ok) {
        devx_lock();
        struct obj_ent *o = grow((void **)&g_objs, &g_n_objs, &g_cap_objs, sizeof(*o));
        if (o) {
            o->obj = obj;
            o->ctx = ctx;
            o->kind = OBJ_OTHER;
            o->id = opcode;
            o->alive = 1;
        }
        devx_unlock();
        db_cold_at(ts, "\"ev\":\"devx_obj_create\",\"fn\":\"mlx5dv_devx_obj_create\",\"obj\":%" PRIu64 ",\"opcode\":%u,\"ret\":%" PRIu64,
                   (uint64_t)(uintptr_t)obj, opcode, (uint64_t)(uintptr_t)obj);
    }
}

static const char *transition_name(uint32_t opcode)
{
    switch (opcode) {
    case PRM_CMD_RST2INIT_QP: return "RST2INIT";
    case PRM_CMD_INIT2RTR_QP: return "INIT2RTR";
    case PRM_CMD_RTR2RTS_QP: return "RTR2RTS";
    case PRM_CMD_RTS2RTS_QP: return "RTS2RTS";
    case PRM_CMD_2ERR_QP: return "2ERR";
    case PRM_CMD_2RST_QP: return "2RST";
    default: return NULL;
    }
}

DB_EXPORT void st_devx_obj_modify(void *obj, const void *in, uint64_t inlen, const void *out, uint64_t outlen,
                                  int ret, uint64_t ts)
{
    if (!in || inlen < 12)
        return;
    uint32_t opcode = prm_get(in, PRM_IN_OPCODE);
    const char *op = transition_name(opcode);
    if (!op)
        return;
    uint32_t qpn = prm_get(in, PRM_QP_IN_QPN);
    int ok = ret == 0 && out && outlen >= 8 && prm_get(out, PRM_OUT_STATUS) == PRM_STAT_OK;
    char extra[160] = "";
    if (opcode == PRM_CMD_INIT2RTR_QP && inlen >= MODIFY_PATH_END) {
        const uint8_t *b = in;
        uint32_t remote = prm_get(in, PRM_QPC_REMOTE_QPN), rlid = prm_get(in, PRM_QPC_PAP_RLID);
        char gid[33];
        for (int i = 0; i < 16; i++)
            snprintf(gid + 2 * i, 3, "%02x", b[PRM_QPC_PAP_RGID_BYTE + i]);
        snprintf(extra, sizeof(extra), ",\"remote_qpn\":%u,\"rlid\":%u,\"grh\":%d,\"rgid\":\"%s\"", remote, rlid,
                 (int)prm_get(in, PRM_QPC_PAP_GRH), gid);
        if (ok) {
            devx_lock();
            struct obj_ent *o = obj_by_ptr(obj);
            if (o && o->qp)
                o->qp->live->remote_qpn = remote;
            devx_unlock();
        }
    }
    db_cold_at(ts, "\"ev\":\"devx_qp_modify\",\"fn\":\"mlx5dv_devx_obj_modify\",\"obj\":%" PRIu64 ",\"qpn\":%u,\"op\":\"%s\"%s,\"ret\":%d",
               (uint64_t)(uintptr_t)obj, qpn, op, extra, ok ? 0 : (ret ? ret : -1));
}

DB_EXPORT void st_devx_obj_destroy(void *obj, int ret, uint64_t ts)
{
    devx_lock();
    struct obj_ent *o = obj_by_ptr(obj), copy = {0};
    if (o) {
        if (ret == 0) {
            o->alive = 0;
            if (o->qp) {
                o->qp->dead = 1; /* its repeater drains and retires it */
                cpu_sq_forget(o->id);
            }
        }
        copy = *o;
    }
    devx_unlock();
    if (!copy.obj)
        return;
    const char *kind = copy.kind == OBJ_QP ? "qp" : copy.kind == OBJ_CQ ? "cq" : "other";
    const char *idname = copy.kind == OBJ_QP ? "qpn" : copy.kind == OBJ_CQ ? "cqn" : "opcode";
    db_cold_at(ts, "\"ev\":\"devx_obj_destroy\",\"fn\":\"mlx5dv_devx_obj_destroy\",\"obj\":%" PRIu64 ",\"kind\":\"%s\",\"%s\":%u,\"ret\":%d",
               (uint64_t)(uintptr_t)obj, kind, idname, copy.id, ret);
}

/* ---- doorbells of QPs the page did not know ------------------------------------------------- */

static struct db_qp *resolve_qp(uint32_t qpn, struct db_page *pg)
{
    struct db_qp *found = NULL;
    devx_lock();
    for (size_t i = g_n_objs; i-- > 0;) {
        struct obj_ent *o = &g_objs[i];
        if (o->alive && o->kind == OBJ_QP && o->id == qpn && o->qp && !o->qp->dead) {
            found = o->qp;
            break;
        }
    }
    if (found && found->repeater < 0)
        db_page_add_qp(pg, found);
    devx_unlock();
    return found;
}

__attribute__((constructor)) static void devx_state_init(void) { db_set_qp_resolver(resolve_qp); }

/* ---- attach mode ------------------------------------------------------------------------------ */

/* A doorbell page mapped before we arrived shows up in /proc/self/maps as a mapping of an RDMA
 * device file (real hardware: /dev/infiniband/uverbsN; the emulated NIC: its UAR files).  Those
 * pages may already be in the GPU's hands: we cannot watch them, so we say so. */
DB_EXPORT int st_devx_scan_preexisting(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) {
        db_cold("\"ev\":\"uar_scan\",\"error\":\"cannot read /proc/self/maps\"");
        return -1;
    }
    char line[4096];
    int n = 0, lines = 0, candidates = 0, known_n = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char path[2048] = "";
        lines++;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %2047[^\n]", &lo, &hi, path) < 2)
            continue;
        if (!strstr(path, "/dev/infiniband/uverbs") && !strstr(path, "simnic-uar"))
            continue;
        candidates++;
        devx_lock();
        struct devx_uar_view v;
        int known = devx_uar_find(lo, hi - lo, &v) >= 0;
        devx_unlock();
        if (known) {
            known_n++;
            continue;
        }
        for (unsigned long p = lo; p < hi; p += 4096) {
            db_cold("\"ev\":\"uar_unwatched\",\"reg_addr\":%lu,\"why\":\"mapped before attach\",\"path\":\"%s\"",
                    p + 0x800, path);
            n++;
        }
    }
    fclose(f);
    /* what the scan saw, so that a page it did not name can be explained */
    db_cold("\"ev\":\"uar_scan\",\"lines\":%d,\"doorbell_mappings\":%d,\"known\":%d,\"unwatched_pages\":%d",
            lines, candidates, known_n, n);
    return n;
}
