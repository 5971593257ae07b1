/* devx state: UARs, umems and the QP / CQ objects a program creates through mlx5dv devx, read
 * from the calls' arguments, results and PRM command mailboxes (layouts: mlx5_ifc.h; byte
 * offsets in ../shared/reference/mlx5-formats.md). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

#include "devx_state.h"

/* PRM opcodes and mailbox byte offsets (big-endian fields) */
enum {
    CMD_CREATE_CQ = 0x400,
    CMD_CREATE_QP = 0x500,
    CMD_RST2INIT_QP = 0x502,
    CMD_INIT2RTR_QP = 0x503,
    CMD_RTR2RTS_QP = 0x504,
    CMD_RTS2RTS_QP = 0x505,
    CMD_2ERR_QP = 0x507,
    CMD_2RST_QP = 0x50a,
};
#define OUT_STATUS 0         /* u8 */
#define OUT_ID 8             /* low 24 bits: qpn / cqn */
#define IN_QPN 8             /* transitions: low 24 bits */
#define QPC 24               /* create_qp_in / transitions: the QP context */
#define QPC_ST (QPC + 1)     /* u8 */
#define QPC_PD (QPC + 4)     /* low 24 */
#define QPC_SIZES (QPC + 8)  /* log_rq_size 22:19, log_rq_stride 18:16, no_sq 15, log_sq_size 14:11 */
#define QPC_UAR (QPC + 12)   /* low 24 */
#define QPC_REMOTE_QPN (QPC + 20)
#define QPC_RLID (QPC + 24 + 6)  /* primary address path: be16 */
#define QPC_GRH (QPC + 24 + 5)   /* bit 7 */
#define QPC_RGID (QPC + 24 + 16) /* 16 bytes */
#define QPC_CQN_SND (QPC + 124)
#define QPC_CQN_RCV (QPC + 156)
#define QPC_DBR_ADDR (QPC + 160) /* be64 */
#define QPC_RQ_TYPE (QPC + 172)  /* bits 26:24 */
#define QPC_DBR_UMEM_VALID (QPC + 208) /* bit 28 */
#define QPC_DBR_UMEM_ID (QPC + 228)
#define QP_WQ_UMEM_OFFSET 256 /* be64 */
#define QP_WQ_UMEM_ID 264
#define QP_WQ_UMEM_VALID 268 /* bit 31 */
#define CQC 16
#define CQC_DBR_UMEM_ID (CQC + 4)
#define CQC_SIZE_UAR (CQC + 12) /* log_cq_size 28:24, uar_page low 24 */
#define CQ_UMEM_OFFSET 80
#define CQ_UMEM_ID 88
#define CQ_UMEM_VALID 92 /* bit 31 */
#define CREATE_QP_MIN_IN 272
#define CREATE_CQ_MIN_IN 96
#define MODIFY_MIN_IN 80

static inline uint32_t be32at(const void *p, size_t off)
{
    const uint8_t *b = (const uint8_t *)p + off;
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}
static inline uint64_t be64at(const void *p, size_t off) { return ((uint64_t)be32at(p, off) << 32) | be32at(p, off + 4); }

enum obj_kind { OBJ_OTHER = 0, OBJ_QP = 1, OBJ_CQ = 2 };

struct uar_ent {
    void *uar, *ctx;
    uint64_t reg_addr, base_addr;
    uint32_t page_id, flags;
    int alive, preexisting;
    struct db_page *page;
    uint64_t fake_host, fake_dptr;
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
static const char *st_name(int st)
{
    switch (st) {
    case MLX5_ST_RC: return "RC";
    case MLX5_ST_UC: return "UC";
    case MLX5_ST_UD: return "UD";
    case MLX5_ST_DCI: return "DCI";
    default: return "OTHER";
    }
}

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
        if (!u->alive || addr + (len ? len : 1) <= page || addr >= page + 4096)
            continue;
        out->reg_addr = u->reg_addr;
        out->page = page;
        out->page_id = u->page_id;
        out->index = (int)i;
        out->repeater = u->page;
        out->fake_host = u->fake_host;
        out->fake_dptr = u->fake_dptr;
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
    const struct mlx5dv_devx_uar *x = uar;
    devx_lock();
    struct uar_ent *u = grow((void **)&g_uars, &g_n_uars, &g_cap_uars, sizeof(*u));
    if (u) {
        u->uar = uar;
        u->ctx = ctx;
        u->reg_addr = (uint64_t)(uintptr_t)x->reg_addr;
        u->base_addr = (uint64_t)(uintptr_t)x->base_addr;
        u->page_id = x->page_id;
        u->flags = flags;
        u->alive = 1;
    }
    devx_unlock();
    db_cold_at(ts, "\"ev\":\"devx_uar_alloc\",\"fn\":\"mlx5dv_devx_alloc_uar\",\"ctx\":%" PRIu64 ",\"uar\":%" PRIu64
               ",\"reg_addr\":%" PRIu64 ",\"base_addr\":%" PRIu64 ",\"page_id\":%u,\"flags\":%u,\"ret\":%" PRIu64,
               (uint64_t)(uintptr_t)ctx, (uint64_t)(uintptr_t)uar, (uint64_t)(uintptr_t)x->reg_addr,
               (uint64_t)(uintptr_t)x->base_addr, x->page_id, flags, (uint64_t)(uintptr_t)uar);
}

/* Before the register goes away: its repeater forwards what is pending and stops for good. */
DB_EXPORT void st_devx_uar_free_enter(void *uar)
{
    devx_lock();
    struct uar_ent *u = uar_by_ptr(uar);
    struct db_page *pg = u ? u->page : NULL;
    devx_unlock();
    if (pg && db_page_stop(pg, 1000) == 0)
        db_cold("\"ev\":\"repeater_stop\",\"repeater\":%d,\"uar_reg_addr\":%" PRIu64 ",\"why\":\"uar freed\"", pg->index,
                (uint64_t)(uintptr_t)pg->target);
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
    uint32_t sizes = be32at(in, QPC_SIZES);
    uint32_t log_sq = (sizes >> 11) & 0xf, log_rq = (sizes >> 19) & 0xf, rq_stride = (sizes >> 16) & 7;
    int no_sq = (sizes >> 15) & 1;
    uint32_t rq_type = (be32at(in, QPC_RQ_TYPE) >> 24) & 7;
    int st = in[QPC_ST];
    uint32_t pd = be32at(in, QPC_PD) & 0xffffff, uar_page = be32at(in, QPC_UAR) & 0xffffff;
    uint32_t cqn_snd = be32at(in, QPC_CQN_SND) & 0xffffff, cqn_rcv = be32at(in, QPC_CQN_RCV) & 0xffffff;
    uint64_t dbr_addr = be64at(in, QPC_DBR_ADDR), wq_off = be64at(in, QP_WQ_UMEM_OFFSET);
    int dbr_valid = (be32at(in, QPC_DBR_UMEM_VALID) >> 28) & 1, wq_valid = (be32at(in, QP_WQ_UMEM_VALID) >> 31) & 1;
    uint32_t dbr_umem = be32at(in, QPC_DBR_UMEM_ID), wq_umem = be32at(in, QP_WQ_UMEM_ID);
    /* the send queue follows the receive queue in the work-queue buffer */
    uint64_t rq_bytes = rq_type == 0 ? ((uint64_t)1 << log_rq) * ((uint64_t)16 << rq_stride) : 0;

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
    struct umem_ent *u = wq_valid ? umem_by_id(ctx, wq_umem) : NULL;
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
    struct umem_ent *du = dbr_valid ? umem_by_id(ctx, dbr_umem) : NULL;
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
    /* a QP made after its UAR was substituted goes straight to that repeater */
    for (size_t i = g_n_uars; i-- > 0;)
        if (g_uars[i].alive && g_uars[i].page && g_uars[i].page_id == uar_page && g_uars[i].ctx == ctx) {
            attach_qp(g_uars[i].page, q);
            break;
        }
    devx_unlock();
    if (!u && !no_sq)
        db_error("devx", "qp 0x%x: its send queue is not in a umem we saw registered (wq_umem_valid %d, id %u): its WQEs cannot be recovered",
                 qpn, wq_valid, wq_umem);
    db_cold_at(ts, "\"ev\":\"devx_qp_create\",\"fn\":\"mlx5dv_devx_obj_create\",\"obj\":%" PRIu64 ",\"qpn\":%u,\"st\":\"%s\",\"pd\":%u"
               ",\"log_sq_size\":%u,\"sq_slots\":%u,\"sq_addr\":%" PRIu64 ",\"sq_umem_id\":%u,\"sq_umem_offset\":%" PRIu64
               ",\"rq_bytes\":%" PRIu64 ",\"dbr_addr\":%" PRIu64 ",\"dbr_umem_id\":%u,\"uar_page\":%u,\"cqn_snd\":%u"
               ",\"cqn_rcv\":%u,\"mem\":\"%s\",\"gpu\":%d,\"ret\":%" PRIu64,
               (uint64_t)(uintptr_t)obj, qpn, st_name(st), pd, log_sq, q->slots, q->sq_addr, wq_umem, wq_off, rq_bytes,
               dbr_loc, dbr_valid ? dbr_umem : 0, uar_page, cqn_snd, cqn_rcv, mem_name(q->sq_mem), q->gpu,
               (uint64_t)(uintptr_t)obj);
}

static void create_cq(void *ctx, const uint8_t *in, uint32_t cqn, void *obj, uint64_t ts)
{
    uint32_t w = be32at(in, CQC_SIZE_UAR);
    uint32_t log_cq = (w >> 24) & 0x1f, uar_page = w & 0xffffff;
    uint32_t umem_id = be32at(in, CQ_UMEM_ID);
    int valid = (be32at(in, CQ_UMEM_VALID) >> 31) & 1;
    uint64_t off = be64at(in, CQ_UMEM_OFFSET), addr = 0;
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
    uint32_t opcode = be32at(in, 0) >> 16;
    int ok = obj && out && outlen >= 12 && ((const uint8_t *)out)[OUT_STATUS] == 0;
    uint32_t id = ok ? be32at(out, OUT_ID) & 0xffffff : 0;
    if (opcode == CMD_CREATE_QP && inlen >= CREATE_QP_MIN_IN) {
        if (ok)
            create_qp(ctx, in, id, obj, ts);
        else
            db_cold_at(ts, "\"ev\":\"devx_qp_create\",\"fn\":\"mlx5dv_devx_obj_create\",\"obj\":0,\"qpn\":0,\"ret\":0");
    } else if (opcode == CMD_CREATE_CQ && inlen >= CREATE_CQ_MIN_IN) {
        if (ok)
            create_cq(ctx, in, id, obj, ts);
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
    case CMD_RST2INIT_QP: return "RST2INIT";
    case CMD_INIT2RTR_QP: return "INIT2RTR";
    case CMD_RTR2RTS_QP: return "RTR2RTS";
    case CMD_RTS2RTS_QP: return "RTS2RTS";
    case CMD_2ERR_QP: return "2ERR";
    case CMD_2RST_QP: return "2RST";
    default: return NULL;
    }
}

DB_EXPORT void st_devx_obj_modify(void *obj, const void *in, uint64_t inlen, const void *out, uint64_t outlen,
                                  int ret, uint64_t ts)
{
    if (!in || inlen < 12)
        return;
    uint32_t opcode = be32at(in, 0) >> 16;
    const char *op = transition_name(opcode);
    if (!op)
        return;
    uint32_t qpn = be32at(in, IN_QPN) & 0xffffff;
    int ok = ret == 0 && out && outlen >= 8 && ((const uint8_t *)out)[OUT_STATUS] == 0;
    char extra[160] = "";
    if (opcode == CMD_INIT2RTR_QP && inlen >= MODIFY_MIN_IN) {
        const uint8_t *b = in;
        uint32_t remote = be32at(in, QPC_REMOTE_QPN) & 0xffffff;
        uint32_t rlid = ((uint32_t)b[QPC_RLID] << 8) | b[QPC_RLID + 1];
        char gid[33];
        for (int i = 0; i < 16; i++)
            snprintf(gid + 2 * i, 3, "%02x", b[QPC_RGID + i]);
        snprintf(extra, sizeof(extra), ",\"remote_qpn\":%u,\"rlid\":%u,\"grh\":%d,\"rgid\":\"%s\"", remote, rlid,
                 (b[QPC_GRH] >> 7) & 1, gid);
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
            if (o->qp)
                o->qp->dead = 1; /* its repeater drains and retires it */
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
