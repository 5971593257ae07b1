/* Protection domains, memory regions, address handles, multicast (not emulated) and memory
 * windows (not emulated).  Destroying a PD still in use fails with EBUSY, as the kernel's
 * uverbs does. */
#include <errno.h>
#include <stdlib.h>

#include "sn_verbs.h"

struct ibv_pd *sn_alloc_pd(struct ibv_context *c)
{
    struct sn_context *ctx = to_sctx(c);
    struct sn_pd *pd = calloc(1, sizeof(*pd));

    if (!pd) {
        errno = ENOMEM;
        return NULL;
    }
    pd->ibpd.context = c;
    pthread_mutex_lock(&ctx->eng->lock);
    pd->pdn = ctx->eng->next_pdn++;
    pthread_mutex_unlock(&ctx->eng->lock);
    pd->ibpd.handle = pd->pdn;
    return &pd->ibpd;
}

/* A parent domain (NVSHMEM's IBGDA makes its DCTs' SRQ and QPs in one): the same protection
 * domain as its PD, so its objects' PD number is the PD's.  Thread domains and custom
 * allocators are not emulated. */
struct ibv_pd *sn_alloc_parent_domain(struct ibv_context *c, struct ibv_parent_domain_init_attr *attr)
{
    struct sn_pd *parent, *pd;

    if (!attr || !attr->pd || attr->pd->context != c) {
        errno = EINVAL;
        return NULL;
    }
    if (attr->td || attr->comp_mask) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    parent = (struct sn_pd *)attr->pd;
    pd = calloc(1, sizeof(*pd));
    if (!pd) {
        errno = ENOMEM;
        return NULL;
    }
    pd->ibpd.context = c;
    pd->pdn = parent->pdn;
    pd->ibpd.handle = parent->ibpd.handle;
    pd->parent = parent;
    atomic_fetch_add(&parent->refs, 1);
    return &pd->ibpd;
}

int sn_dealloc_pd(struct ibv_pd *ibpd)
{
    struct sn_pd *pd = (struct sn_pd *)ibpd;

    if (atomic_load(&pd->refs))
        return EBUSY;
    if (pd->parent)
        atomic_fetch_sub(&pd->parent->refs, 1);
    free(pd);
    return 0;
}

#define KNOWN_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
                      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |     \
                      IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING)

struct ibv_mr *sn_reg_mr(struct ibv_pd *ibpd, void *addr, size_t len, uint64_t iova, unsigned access)
{
    struct sn_pd *pd = (struct sn_pd *)ibpd;
    struct sn_context *ctx = to_sctx(ibpd->context);
    struct sn_mem mem;
    struct sn_mr *mr;
    int err;

    /* remote write or atomic access requires local write (IB spec C10-67) */
    if (((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(access & IBV_ACCESS_LOCAL_WRITE)) ||
        (access & ~(unsigned)(KNOWN_ACCESS | IBV_ACCESS_OPTIONAL_RANGE))) {
        errno = EINVAL;
        return NULL;
    }
    if (access & IBV_ACCESS_ON_DEMAND) {    /* the device reports no ODP capability */
        errno = EOPNOTSUPP;
        return NULL;
    }
    /* uverbs: the I/O virtual address keeps the buffer's offset in its page */
    if (!(access & IBV_ACCESS_ZERO_BASED) && ((iova ^ (uintptr_t)addr) & (SN_PAGE - 1))) {
        errno = EINVAL;
        return NULL;
    }
    sn_mem_classify(addr, &mem);
    /* device memory is reached through the CUDA driver (as the peer-memory client lets the
     * kernel pin it); host memory must be pinnable */
    if ((!addr && len) || (!mem.gpu && !sn_range_pinnable(addr, len, access))) {
        errno = EFAULT;
        return NULL;
    }
    mr = calloc(1, sizeof(*mr));
    if (!mr) {
        errno = ENOMEM;
        return NULL;
    }
    mr->pd = pd;
    mr->pdn = pd->pdn;
    mr->addr = addr;
    mr->len = len;
    mr->iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : iova;
    mr->access = access;
    mr->mem = mem;
    mr->ibmr.context = ibpd->context;
    mr->ibmr.pd = ibpd;
    mr->ibmr.addr = addr;
    mr->ibmr.length = len;
    pthread_mutex_lock(&ctx->eng->lock);
    err = sn_engine_add_mr(ctx->eng, mr);
    if (!err && mr->mem.gpu)
        ctx->eng->n_gpu_objects++;      /* GPUDirect memory: no polling assist */
    pthread_mutex_unlock(&ctx->eng->lock);
    if (err) {
        free(mr);
        errno = err;
        return NULL;
    }
    mr->ibmr.handle = mr->ibmr.lkey;
    atomic_fetch_add(&pd->refs, 1);
    return &mr->ibmr;
}

int sn_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *ibpd, void *addr, size_t len,
                int access)
{
    struct sn_mr *mr = (struct sn_mr *)ibmr;
    struct sn_context *ctx = to_sctx(ibmr->context);

    if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)
        return IBV_REREG_MR_ERR_INPUT;
    if ((flags & IBV_REREG_MR_CHANGE_ACCESS) &&
        ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(access & IBV_ACCESS_LOCAL_WRITE)))
        return IBV_REREG_MR_ERR_INPUT;
    if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && !addr && len)
        return IBV_REREG_MR_ERR_INPUT;
    if (flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS)) {
        /* the kernel pins the new range (or the old one for the new access) again */
        void *a = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->addr;
        size_t l = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? len : mr->len;
        unsigned acc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? (unsigned)access : mr->access;
        struct sn_mem mem;

        sn_mem_classify(a, &mem);
        if (!mem.gpu && !sn_range_pinnable(a, l, acc)) {
            errno = EFAULT;
            return IBV_REREG_MR_ERR_CMD;
        }
    }
    pthread_mutex_lock(&ctx->eng->lock);
    if (flags & IBV_REREG_MR_CHANGE_PD) {
        struct sn_pd *npd = (struct sn_pd *)ibpd;

        atomic_fetch_sub(&mr->pd->refs, 1);
        atomic_fetch_add(&npd->refs, 1);
        mr->pd = npd;
        mr->pdn = npd->pdn;
        ibmr->pd = ibpd;
    }
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        mr->addr = addr;
        mr->len = len;
        mr->iova = (uintptr_t)addr;
        if (mr->mem.gpu)
            ctx->eng->n_gpu_objects--;
        sn_mem_classify(addr, &mr->mem);
        if (mr->mem.gpu)
            ctx->eng->n_gpu_objects++;
        ibmr->addr = addr;
        ibmr->length = len;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS)
        mr->access = (unsigned)access;
    pthread_mutex_unlock(&ctx->eng->lock);
    return 0;
}

int sn_dereg_mr(struct ibv_mr *ibmr)
{
    struct sn_mr *mr = (struct sn_mr *)ibmr;
    struct sn_context *ctx = to_sctx(ibmr->context);

    pthread_mutex_lock(&ctx->eng->lock);
    sn_engine_del_mr(ctx->eng, mr);
    if (mr->mem.gpu)
        ctx->eng->n_gpu_objects--;
    pthread_mutex_unlock(&ctx->eng->lock);
    atomic_fetch_sub(&mr->pd->refs, 1);
    free(mr);
    return 0;
}

/* Address handles: the mlx5 address vector a UD WQE's datagram segment carries, built as
 * rdma-core's mlx5 builds it (mlx5dv_init_obj hands it out; ibv_post_send copies it).  The
 * port must be 1 and a LID route needs a DLID, as for a connected QP's address vector. */
struct ibv_ah *sn_create_ah(struct ibv_pd *ibpd, struct ibv_ah_attr *attr)
{
    struct sn_ah *ah;

    if (attr->port_num != 1 || (!attr->is_global && !attr->dlid) || attr->sl > 15 ||
        (attr->is_global && attr->grh.sgid_index >= 128)) {
        errno = EINVAL;
        return NULL;
    }
    ah = calloc(1, sizeof(*ah));
    if (!ah) {
        errno = ENOMEM;
        return NULL;
    }
    ah->ibah.context = ibpd->context;
    ah->ibah.pd = ibpd;
    ah->attr = *attr;
    ah->av.stat_rate_sl = (uint8_t)(attr->static_rate << 4 | (attr->sl & 0xf));
    ah->av.fl_mlid = attr->src_path_bits & 0x7f;
    ah->av.rlid = htobe16(attr->dlid);
    if (attr->is_global) {
        ah->av.tclass = attr->grh.traffic_class;
        ah->av.hop_limit = attr->grh.hop_limit;
        ah->av.grh_gid_fl = htobe32(attr->grh.flow_label | 1u << 30 |
                                    (uint32_t)attr->grh.sgid_index << 20);
        memcpy(ah->av.rgid, attr->grh.dgid.raw, 16);
    }
    atomic_fetch_add(&((struct sn_pd *)ibpd)->refs, 1);
    return &ah->ibah;
}

int sn_destroy_ah(struct ibv_ah *ibah)
{
    atomic_fetch_sub(&((struct sn_pd *)ibah->pd)->refs, 1);
    free(ibah);
    return 0;
}

int sn_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    return EOPNOTSUPP;      /* multicast needs UD QPs */
}

int sn_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    return EOPNOTSUPP;
}

struct ibv_mw *sn_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
    errno = EOPNOTSUPP;     /* memory windows (UMR WQEs) are not emulated */
    return NULL;
}

int sn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
    return EOPNOTSUPP;
}

int sn_dealloc_mw(struct ibv_mw *mw)
{
    return EOPNOTSUPP;
}
