/* libibverbs.so.1 of the emulated NIC: the generic verbs layer.
 *
 * Like rdma-core's libibverbs it holds no device logic: it loads the provider library
 * (our libmlx5.so.1, from the directory this library was loaded from) the first time the
 * device list is asked for, and every verb dispatches to the provider's operations.  The
 * data-path verbs (post_send, post_recv, poll_cq, ...) never pass through here: they are
 * static inline in verbs.h and call the context's ops table directly.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include "sn_export.h"
#include "sn_provider.h"

/* verbs.h turns these into inline wrappers; here they are the exported functions */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port

static const struct sn_provider_ops *g_ops;
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static char g_load_error[PATH_MAX + 256];

/* Called by the provider library's constructor (the rdma-core name, our own argument). */
SN_EXPORT void verbs_register_driver_34(const struct sn_provider_ops *ops)
{
    if (!ops || ops->abi != SN_PROVIDER_ABI) {
        snprintf(g_load_error, sizeof(g_load_error),
                 "simnic: provider ABI mismatch (libibverbs and libmlx5 from different builds)");
        return;
    }
    g_ops = ops;
}

static void load_provider(void)
{
    Dl_info info;
    char self[PATH_MAX], path[PATH_MAX + 32];

    if (g_ops)      /* the provider was loaded first (a program linked against libmlx5) */
        return;
    if (!dladdr((void *)load_provider, &info) || !info.dli_fname) {
        snprintf(g_load_error, sizeof(g_load_error), "simnic: cannot locate libibverbs.so.1");
        return;
    }
    snprintf(self, sizeof(self), "%s", info.dli_fname);
    snprintf(path, sizeof(path), "%s/libmlx5.so.1", dirname(self));
    if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
        snprintf(g_load_error, sizeof(g_load_error), "simnic: cannot load %s: %s", path,
                 dlerror());
        return;
    }
    if (!g_ops && !g_load_error[0])
        snprintf(g_load_error, sizeof(g_load_error),
                 "simnic: %s did not register a provider", path);
}

static const struct sn_provider_ops *P(void)
{
    pthread_once(&g_load_once, load_provider);
    if (!g_ops) {
        static int said;
        if (!said++)
            fprintf(stderr, "%s\n", g_load_error);
    }
    return g_ops;
}

/* Verbs taking an object can only be reached once a device was opened, so the provider is
 * loaded by then. */
#define OPS g_ops

/* ---- devices ---------------------------------------------------------------------- */

SN_EXPORT struct ibv_device **sn_get_device_list_1_1(int *num)
{
    const struct sn_provider_ops *ops = P();

    if (!ops) {
        struct ibv_device **empty = calloc(1, sizeof(*empty));

        if (num)
            *num = 0;
        if (!empty)
            errno = ENOMEM;
        return empty;
    }
    return ops->get_device_list(num);
}
SN_SYMVER_DEFAULT(sn_get_device_list_1_1, ibv_get_device_list, IBVERBS_1.1);

SN_EXPORT void sn_free_device_list_1_1(struct ibv_device **list)
{
    free(list);
}
SN_SYMVER_DEFAULT(sn_free_device_list_1_1, ibv_free_device_list, IBVERBS_1.1);

SN_EXPORT const char *sn_get_device_name_1_1(struct ibv_device *dev)
{
    return dev->name;
}
SN_SYMVER_DEFAULT(sn_get_device_name_1_1, ibv_get_device_name, IBVERBS_1.1);

SN_EXPORT __be64 sn_get_device_guid_1_1(struct ibv_device *dev)
{
    return P() ? OPS->device_guid(dev) : 0;
}
SN_SYMVER_DEFAULT(sn_get_device_guid_1_1, ibv_get_device_guid, IBVERBS_1.1);

SN_EXPORT int ibv_get_device_index(struct ibv_device *dev)
{
    return P() ? OPS->device_index(dev) : -1;
}

SN_EXPORT struct ibv_context *sn_open_device_1_1(struct ibv_device *dev)
{
    if (!P()) {
        errno = ENODEV;
        return NULL;
    }
    return OPS->open_device(dev);
}
SN_SYMVER_DEFAULT(sn_open_device_1_1, ibv_open_device, IBVERBS_1.1);

SN_EXPORT int sn_close_device_1_1(struct ibv_context *ctx)
{
    return OPS->close_device(ctx);
}
SN_SYMVER_DEFAULT(sn_close_device_1_1, ibv_close_device, IBVERBS_1.1);

SN_EXPORT int sn_get_async_event_1_1(struct ibv_context *ctx, struct ibv_async_event *ev)
{
    return OPS->get_async_event(ctx, ev);
}
SN_SYMVER_DEFAULT(sn_get_async_event_1_1, ibv_get_async_event, IBVERBS_1.1);

SN_EXPORT void sn_ack_async_event_1_1(struct ibv_async_event *ev)
{
    OPS->ack_async_event(ev);
}
SN_SYMVER_DEFAULT(sn_ack_async_event_1_1, ibv_ack_async_event, IBVERBS_1.1);

SN_EXPORT int sn_query_device_1_1(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    return OPS->query_device(ctx, attr);
}
SN_SYMVER_DEFAULT(sn_query_device_1_1, ibv_query_device, IBVERBS_1.1);

/* The exported ibv_query_port takes the pre-2018 struct layout, up to and including `flags`
 * (verbs.h reaches the provider through verbs_context.query_port instead); fill only the
 * fields that layout had, as rdma-core does. */
SN_EXPORT int sn_query_port_1_1(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
    struct ibv_port_attr full;
    int ret;

    memset(&full, 0, sizeof(full));
    ret = OPS->query_port(ctx, port, &full, sizeof(full));
    if (!ret)
        memcpy(attr, &full, SN_COMPAT_PORT_ATTR_LEN);
    return ret;
}
SN_SYMVER_DEFAULT(sn_query_port_1_1, ibv_query_port, IBVERBS_1.1);

SN_EXPORT int sn_query_gid_1_1(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
    return OPS->query_gid(ctx, port, index, gid);
}
SN_SYMVER_DEFAULT(sn_query_gid_1_1, ibv_query_gid, IBVERBS_1.1);

SN_EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
                                struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
    return OPS->query_gid_ex(ctx, port, index, entry, flags, entry_size);
}

SN_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
                                       size_t max, uint32_t flags, size_t entry_size)
{
    return OPS->query_gid_table(ctx, entries, max, flags, entry_size);
}

SN_EXPORT int sn_query_pkey_1_1(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
    return OPS->query_pkey(ctx, port, index, pkey);
}
SN_SYMVER_DEFAULT(sn_query_pkey_1_1, ibv_query_pkey, IBVERBS_1.1);

SN_EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
    __be16 cur;
    int i;

    for (i = 0; !OPS->query_pkey(ctx, port, i, &cur); i++)
        if (cur == pkey)
            return i;
    return -1;
}

/* ---- protection domains and memory ------------------------------------------------ */

SN_EXPORT struct ibv_pd *sn_alloc_pd_1_1(struct ibv_context *ctx)
{
    return OPS->alloc_pd(ctx);
}
SN_SYMVER_DEFAULT(sn_alloc_pd_1_1, ibv_alloc_pd, IBVERBS_1.1);

SN_EXPORT int sn_dealloc_pd_1_1(struct ibv_pd *pd)
{
    return OPS->dealloc_pd(pd);
}
SN_SYMVER_DEFAULT(sn_dealloc_pd_1_1, ibv_dealloc_pd, IBVERBS_1.1);

SN_EXPORT struct ibv_mr *sn_reg_mr_1_1(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return OPS->reg_mr(pd, addr, len, (uintptr_t)addr, (unsigned)access);
}
SN_SYMVER_DEFAULT(sn_reg_mr_1_1, ibv_reg_mr, IBVERBS_1.1);

SN_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len,
                                         uint64_t iova, int access)
{
    return OPS->reg_mr(pd, addr, len, iova, (unsigned)access);
}

SN_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len,
                                          uint64_t iova, unsigned access)
{
    return OPS->reg_mr(pd, addr, len, iova, access);
}

/* A dma-buf is a kernel object of a GPU or accelerator driver; the emulated NIC has no
 * kernel side to import one. */
SN_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len,
                                           uint64_t iova, int fd, int access)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SN_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                           size_t len, int access)
{
    return OPS->rereg_mr(mr, flags, pd, addr, len, access);
}

SN_EXPORT int sn_dereg_mr_1_1(struct ibv_mr *mr)
{
    return OPS->dereg_mr(mr);
}
SN_SYMVER_DEFAULT(sn_dereg_mr_1_1, ibv_dereg_mr, IBVERBS_1.1);

/* Import verbs share objects between processes through the kernel's uverbs file. */
SN_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SN_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SN_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
}

SN_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SN_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
}

SN_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SN_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
}

/* ---- completion queues and channels ------------------------------------------------ */

SN_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
    return OPS->create_comp_channel(ctx);
}

SN_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
    return OPS->destroy_comp_channel(ch);
}

SN_EXPORT struct ibv_cq *sn_create_cq_1_1(struct ibv_context *ctx, int cqe, void *cq_context,
                                          struct ibv_comp_channel *ch, int comp_vector)
{
    return OPS->create_cq(ctx, cqe, cq_context, ch, comp_vector);
}
SN_SYMVER_DEFAULT(sn_create_cq_1_1, ibv_create_cq, IBVERBS_1.1);

SN_EXPORT int sn_resize_cq_1_1(struct ibv_cq *cq, int cqe)
{
    return OPS->resize_cq(cq, cqe);
}
SN_SYMVER_DEFAULT(sn_resize_cq_1_1, ibv_resize_cq, IBVERBS_1.1);

SN_EXPORT int sn_destroy_cq_1_1(struct ibv_cq *cq)
{
    return OPS->destroy_cq(cq);
}
SN_SYMVER_DEFAULT(sn_destroy_cq_1_1, ibv_destroy_cq, IBVERBS_1.1);

SN_EXPORT int sn_get_cq_event_1_1(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
    return OPS->get_cq_event(ch, cq, cq_context);
}
SN_SYMVER_DEFAULT(sn_get_cq_event_1_1, ibv_get_cq_event, IBVERBS_1.1);

SN_EXPORT void sn_ack_cq_events_1_1(struct ibv_cq *cq, unsigned n)
{
    OPS->ack_cq_events(cq, n);
}
SN_SYMVER_DEFAULT(sn_ack_cq_events_1_1, ibv_ack_cq_events, IBVERBS_1.1);

/* ---- shared receive queues --------------------------------------------------------- */

SN_EXPORT struct ibv_srq *sn_create_srq_1_1(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
    return OPS->create_srq(pd, attr);
}
SN_SYMVER_DEFAULT(sn_create_srq_1_1, ibv_create_srq, IBVERBS_1.1);

SN_EXPORT int sn_modify_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
    return OPS->modify_srq(srq, attr, mask);
}
SN_SYMVER_DEFAULT(sn_modify_srq_1_1, ibv_modify_srq, IBVERBS_1.1);

SN_EXPORT int sn_query_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
    return OPS->query_srq(srq, attr);
}
SN_SYMVER_DEFAULT(sn_query_srq_1_1, ibv_query_srq, IBVERBS_1.1);

SN_EXPORT int sn_destroy_srq_1_1(struct ibv_srq *srq)
{
    return OPS->destroy_srq(srq);
}
SN_SYMVER_DEFAULT(sn_destroy_srq_1_1, ibv_destroy_srq, IBVERBS_1.1);

/* ---- queue pairs ------------------------------------------------------------------- */

SN_EXPORT struct ibv_qp *sn_create_qp_1_1(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    return OPS->create_qp(pd, attr);
}
SN_SYMVER_DEFAULT(sn_create_qp_1_1, ibv_create_qp, IBVERBS_1.1);

SN_EXPORT int sn_query_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                              struct ibv_qp_init_attr *init)
{
    return OPS->query_qp(qp, attr, mask, init);
}
SN_SYMVER_DEFAULT(sn_query_qp_1_1, ibv_query_qp, IBVERBS_1.1);

SN_EXPORT int sn_modify_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    return OPS->modify_qp(qp, attr, mask);
}
SN_SYMVER_DEFAULT(sn_modify_qp_1_1, ibv_modify_qp, IBVERBS_1.1);

SN_EXPORT int sn_destroy_qp_1_1(struct ibv_qp *qp)
{
    if (!qp)
        return EINVAL;  /* UCX 1.13 destroys the QP it failed to create on an error path */
    return OPS->destroy_qp(qp);
}
SN_SYMVER_DEFAULT(sn_destroy_qp_1_1, ibv_destroy_qp, IBVERBS_1.1);

SN_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    return OPS->qp_to_qp_ex(qp);
}

SN_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
    return OPS->query_qp_data_in_order(qp, op, flags);
}

SN_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    return OPS->set_ece(qp, ece);
}

SN_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    return OPS->query_ece(qp, ece);
}

/* ---- address handles and multicast ------------------------------------------------- */

SN_EXPORT struct ibv_ah *sn_create_ah_1_1(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    return OPS->create_ah(pd, attr);
}
SN_SYMVER_DEFAULT(sn_create_ah_1_1, ibv_create_ah, IBVERBS_1.1);

SN_EXPORT int sn_destroy_ah_1_1(struct ibv_ah *ah)
{
    return OPS->destroy_ah(ah);
}
SN_SYMVER_DEFAULT(sn_destroy_ah_1_1, ibv_destroy_ah, IBVERBS_1.1);

SN_EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc,
                                  struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
    memset(ah, 0, sizeof(*ah));
    ah->dlid = wc->slid;
    ah->sl = wc->sl;
    ah->src_path_bits = wc->dlid_path_bits;
    ah->port_num = port;
    if (wc->wc_flags & IBV_WC_GRH) {
        uint32_t flow = be32toh(grh->version_tclass_flow);

        ah->is_global = 1;
        ah->grh.dgid = grh->sgid;
        ah->grh.flow_label = flow & 0xfffff;
        ah->grh.hop_limit = 0xff;
        ah->grh.traffic_class = (flow >> 20) & 0xff;
    }
    return 0;
}

SN_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                                               struct ibv_grh *grh, uint8_t port)
{
    struct ibv_ah_attr attr;

    if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr))
        return NULL;
    return OPS->create_ah(pd, &attr);
}

SN_EXPORT int sn_attach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    return OPS->attach_mcast(qp, gid, lid);
}
SN_SYMVER_DEFAULT(sn_attach_mcast_1_1, ibv_attach_mcast, IBVERBS_1.1);

SN_EXPORT int sn_detach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    return OPS->detach_mcast(qp, gid, lid);
}
SN_SYMVER_DEFAULT(sn_detach_mcast_1_1, ibv_detach_mcast, IBVERBS_1.1);

/* The emulated port's link layer is InfiniBand: there is no Ethernet L2 address. */
SN_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr,
                                          uint8_t eth_mac[6], uint16_t *vid)
{
    return EINVAL;
}

/* ---- fork support: a kernel with RDMA since 5.13 makes it unneeded ------------------ */

SN_EXPORT int ibv_fork_init(void)
{
    return 0;
}

SN_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
    return IBV_FORK_UNNEEDED;
}

SN_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
    return 0;
}

SN_EXPORT int ibv_dofork_range(void *base, size_t size)
{
    return 0;
}

/* ---- strings and rates (the exact texts of rdma-core) ------------------------------ */

SN_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const str[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };

    if ((int)status < 0 || (unsigned)status >= sizeof(str) / sizeof(str[0]))
        return "unknown";
    return str[status];
}

SN_EXPORT const char *ibv_node_type_str(enum ibv_node_type type)
{
    static const char *const str[] = {
        [IBV_NODE_CA] = "InfiniBand channel adapter",
        [IBV_NODE_SWITCH] = "InfiniBand switch",
        [IBV_NODE_ROUTER] = "InfiniBand router",
        [IBV_NODE_RNIC] = "iWARP NIC",
        [IBV_NODE_USNIC] = "usNIC",
        [IBV_NODE_USNIC_UDP] = "usNIC UDP",
        [IBV_NODE_UNSPECIFIED] = "unspecified",
    };

    if ((int)type < IBV_NODE_CA || (unsigned)type >= sizeof(str) / sizeof(str[0]))
        return "unknown";
    return str[type];
}

SN_EXPORT const char *ibv_port_state_str(enum ibv_port_state state)
{
    static const char *const str[] = {
        [IBV_PORT_NOP] = "no state change (NOP)",
        [IBV_PORT_DOWN] = "down",
        [IBV_PORT_INIT] = "init",
        [IBV_PORT_ARMED] = "armed",
        [IBV_PORT_ACTIVE] = "active",
        [IBV_PORT_ACTIVE_DEFER] = "active defer",
    };

    if ((int)state < 0 || (unsigned)state >= sizeof(str) / sizeof(str[0]))
        return "unknown";
    return str[state];
}

SN_EXPORT const char *ibv_event_type_str(enum ibv_event_type event)
{
    static const char *const str[] = {
        [IBV_EVENT_CQ_ERR] = "CQ error",
        [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
        [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
        [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
        [IBV_EVENT_COMM_EST] = "communication established",
        [IBV_EVENT_SQ_DRAINED] = "send queue drained",
        [IBV_EVENT_PATH_MIG] = "path migrated",
        [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
        [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
        [IBV_EVENT_PORT_ACTIVE] = "port active",
        [IBV_EVENT_PORT_ERR] = "port error",
        [IBV_EVENT_LID_CHANGE] = "LID change",
        [IBV_EVENT_PKEY_CHANGE] = "P_Key change",
        [IBV_EVENT_SM_CHANGE] = "SM change",
        [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
        [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
        [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
        [IBV_EVENT_GID_CHANGE] = "GID table change",
        [IBV_EVENT_WQ_FATAL] = "WQ fatal",
    };

    if ((int)event < 0 || (unsigned)event >= sizeof(str) / sizeof(str[0]))
        return "unknown";
    return str[event];
}

/* rate enum -> multiple of 2.5 Gb/s (-1 where it is no multiple) and -> Mb/s */
static const struct {
    int mult;
    int mbps;
} g_rates[] = {
    [IBV_RATE_2_5_GBPS] = {1, 2500},        [IBV_RATE_5_GBPS] = {2, 5000},
    [IBV_RATE_10_GBPS] = {4, 10000},        [IBV_RATE_20_GBPS] = {8, 20000},
    [IBV_RATE_30_GBPS] = {12, 30000},       [IBV_RATE_40_GBPS] = {16, 40000},
    [IBV_RATE_60_GBPS] = {24, 60000},       [IBV_RATE_80_GBPS] = {32, 80000},
    [IBV_RATE_120_GBPS] = {48, 120000},     [IBV_RATE_14_GBPS] = {-1, 14062},
    [IBV_RATE_56_GBPS] = {-1, 56250},       [IBV_RATE_112_GBPS] = {-1, 112500},
    [IBV_RATE_168_GBPS] = {-1, 168750},     [IBV_RATE_25_GBPS] = {-1, 25781},
    [IBV_RATE_100_GBPS] = {-1, 103125},     [IBV_RATE_200_GBPS] = {-1, 206250},
    [IBV_RATE_300_GBPS] = {-1, 309375},     [IBV_RATE_28_GBPS] = {11, 28125},
    [IBV_RATE_50_GBPS] = {20, 53125},       [IBV_RATE_400_GBPS] = {160, 425000},
    [IBV_RATE_600_GBPS] = {240, 637500},    [IBV_RATE_800_GBPS] = {320, 850000},
    [IBV_RATE_1200_GBPS] = {480, 1275000},
};
#define N_RATES ((int)(sizeof(g_rates) / sizeof(g_rates[0])))

SN_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
    if ((int)rate < 0 || (int)rate >= N_RATES || !g_rates[rate].mbps)
        return -1;
    return g_rates[rate].mult;
}

SN_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
    for (int r = 0; r < N_RATES; r++)
        if (g_rates[r].mbps && g_rates[r].mult == mult && mult > 0)
            return (enum ibv_rate)r;
    return IBV_RATE_MAX;
}

SN_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
    if ((int)rate < 0 || (int)rate >= N_RATES || !g_rates[rate].mbps)
        return -1;
    return g_rates[rate].mbps;
}

SN_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
    for (int r = 0; r < N_RATES; r++)
        if (g_rates[r].mbps && g_rates[r].mbps == mbps)
            return (enum ibv_rate)r;
    return IBV_RATE_MAX;
}

/* ---- sysfs helpers ----------------------------------------------------------------- */

SN_EXPORT const char *ibv_get_sysfs_path(void)
{
    const char *env = getenv("SYSFS_PATH");

    return env && *env ? env : "/sys";
}

/* Reads DIR/FILE into BUF (NUL-terminated, trailing newline dropped); the emulated devices'
 * files (below /sys/class/infiniband/mlx5_N) come from the provider. */
SN_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
    char path[PATH_MAX];
    ssize_t len;
    int fd;

    if (P()) {
        int n = OPS->read_sysfs(dir, file, buf, size);

        if (n >= 0 || errno != ENOENT)
            return n;
    }
    if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    len = read(fd, buf, size);
    close(fd);
    if (len > 0) {
        if ((size_t)len < size)
            buf[len] = '\0';
        else
            buf[size - 1] = '\0';
        if (buf[len - 1] == '\n')
            buf[--len] = '\0';
    }
    return (int)len;
}

/* rdma-core's private form takes its internal verbs_sysfs_dev; nothing but providers use it. */
SN_EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev,
                                        const char *fnfmt, ...)
{
    errno = EOPNOTSUPP;
    return -1;
}

/* enum ibv_gid_type_sysfs: 0 is "IB/RoCE v1", the type of every GID of an InfiniBand port. */
SN_EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index,
                                 int *type)
{
    union ibv_gid gid;

    if (OPS->query_gid(ctx, port, (int)index, &gid))
        return -1;
    *type = 0;
    return 0;
}

/* ---- kernel-structure helpers kept for old rdma-core users -------------------------- */

SN_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
    memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
    dst->grh.flow_label = src->grh.flow_label;
    dst->grh.sgid_index = src->grh.sgid_index;
    dst->grh.hop_limit = src->grh.hop_limit;
    dst->grh.traffic_class = src->grh.traffic_class;
    dst->dlid = src->dlid;
    dst->sl = src->sl;
    dst->src_path_bits = src->src_path_bits;
    dst->static_rate = src->static_rate;
    dst->is_global = src->is_global;
    dst->port_num = src->port_num;
}

SN_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
    dst->cur_qp_state = src->cur_qp_state;
    dst->path_mtu = src->path_mtu;
    dst->path_mig_state = src->path_mig_state;
    dst->qkey = src->qkey;
    dst->rq_psn = src->rq_psn;
    dst->sq_psn = src->sq_psn;
    dst->dest_qp_num = src->dest_qp_num;
    dst->qp_access_flags = src->qp_access_flags;
    dst->cap.max_send_wr = src->max_send_wr;
    dst->cap.max_recv_wr = src->max_recv_wr;
    dst->cap.max_send_sge = src->max_send_sge;
    dst->cap.max_recv_sge = src->max_recv_sge;
    dst->cap.max_inline_data = src->max_inline_data;
    ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
    ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
    dst->pkey_index = src->pkey_index;
    dst->alt_pkey_index = src->alt_pkey_index;
    dst->en_sqd_async_notify = src->en_sqd_async_notify;
    dst->sq_draining = src->sq_draining;
    dst->max_rd_atomic = src->max_rd_atomic;
    dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
    dst->min_rnr_timer = src->min_rnr_timer;
    dst->port_num = src->port_num;
    dst->timeout = src->timeout;
    dst->retry_cnt = src->retry_cnt;
    dst->rnr_retry = src->rnr_retry;
    dst->alt_port_num = src->alt_port_num;
    dst->alt_timeout = src->alt_timeout;
}

SN_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
    memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
    memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
    dst->dlid = src->dlid;
    dst->slid = src->slid;
    dst->raw_traffic = src->raw_traffic;
    dst->flow_label = src->flow_label;
    dst->hop_limit = src->hop_limit;
    dst->traffic_class = src->traffic_class;
    dst->reversible = src->reversible;
    dst->numb_path = src->numb_path;
    dst->pkey = src->pkey;
    dst->sl = src->sl;
    dst->mtu_selector = src->mtu_selector;
    dst->mtu = src->mtu;
    dst->rate_selector = src->rate_selector;
    dst->rate = src->rate;
    dst->packet_life_time = src->packet_life_time;
    dst->preference = src->preference;
    dst->packet_life_time_selector = src->packet_life_time_selector;
}

SN_EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
    memcpy(dst->dgid, src->dgid.raw, sizeof(src->dgid));
    memcpy(dst->sgid, src->sgid.raw, sizeof(src->sgid));
    dst->dlid = src->dlid;
    dst->slid = src->slid;
    dst->raw_traffic = src->raw_traffic;
    dst->flow_label = src->flow_label;
    dst->hop_limit = src->hop_limit;
    dst->traffic_class = src->traffic_class;
    dst->reversible = src->reversible;
    dst->numb_path = src->numb_path;
    dst->pkey = src->pkey;
    dst->sl = src->sl;
    dst->mtu_selector = src->mtu_selector;
    dst->mtu = src->mtu;
    dst->rate_selector = src->rate_selector;
    dst->rate = src->rate;
    dst->packet_life_time = src->packet_life_time;
    dst->preference = src->preference;
    dst->packet_life_time_selector = src->packet_life_time_selector;
}

/* ---- the libibverbs 1.0 ABI (2006, pre-"1.1" structure layouts) ---------------------
 * rdma-core still carries wrappers for binaries linked against it; the emulated NIC does
 * not: each entry point reports ENOSYS once on stderr.  Everything built since binds the
 * IBVERBS_1.1 (or later) versions above. */
static void compat_1_0(const char *name)
{
    static int said;

    if (!said++)
        fprintf(stderr, "simnic: %s@IBVERBS_1.0 (the libibverbs 1.0 ABI) is not emulated\n",
                name);
    errno = ENOSYS;
}

#define COMPAT_1_0_PTR(name)                                          \
    SN_EXPORT void *sn_c10_##name(void)                               \
    {                                                                 \
        compat_1_0(#name);                                            \
        return NULL;                                                  \
    }                                                                 \
    SN_SYMVER_COMPAT(sn_c10_##name, name, IBVERBS_1.0)
#define COMPAT_1_0_INT(name)                                          \
    SN_EXPORT int sn_c10_##name(void)                                 \
    {                                                                 \
        compat_1_0(#name);                                            \
        return ENOSYS;                                                \
    }                                                                 \
    SN_SYMVER_COMPAT(sn_c10_##name, name, IBVERBS_1.0)

COMPAT_1_0_PTR(ibv_get_device_list);
COMPAT_1_0_INT(ibv_free_device_list);
COMPAT_1_0_PTR(ibv_get_device_name);
COMPAT_1_0_INT(ibv_get_device_guid);
COMPAT_1_0_PTR(ibv_open_device);
COMPAT_1_0_INT(ibv_close_device);
COMPAT_1_0_INT(ibv_get_async_event);
COMPAT_1_0_INT(ibv_ack_async_event);
COMPAT_1_0_INT(ibv_query_device);
COMPAT_1_0_INT(ibv_query_port);
COMPAT_1_0_INT(ibv_query_gid);
COMPAT_1_0_INT(ibv_query_pkey);
COMPAT_1_0_PTR(ibv_alloc_pd);
COMPAT_1_0_INT(ibv_dealloc_pd);
COMPAT_1_0_PTR(ibv_reg_mr);
COMPAT_1_0_INT(ibv_dereg_mr);
COMPAT_1_0_PTR(ibv_create_cq);
COMPAT_1_0_INT(ibv_resize_cq);
COMPAT_1_0_INT(ibv_destroy_cq);
COMPAT_1_0_INT(ibv_get_cq_event);
COMPAT_1_0_INT(ibv_ack_cq_events);
COMPAT_1_0_PTR(ibv_create_srq);
COMPAT_1_0_INT(ibv_modify_srq);
COMPAT_1_0_INT(ibv_query_srq);
COMPAT_1_0_INT(ibv_destroy_srq);
COMPAT_1_0_PTR(ibv_create_qp);
COMPAT_1_0_INT(ibv_query_qp);
COMPAT_1_0_INT(ibv_modify_qp);
COMPAT_1_0_INT(ibv_destroy_qp);
COMPAT_1_0_PTR(ibv_create_ah);
COMPAT_1_0_INT(ibv_destroy_ah);
COMPAT_1_0_INT(ibv_attach_mcast);
COMPAT_1_0_INT(ibv_detach_mcast);

/* Pre-rdma-core provider registration (libibverbs 1.1 drivers). */
SN_EXPORT void sn_c11_ibv_register_driver(const char *name, void *init_func)
{
    fprintf(stderr, "simnic: ignoring legacy provider %s (ibv_register_driver)\n",
            name ? name : "?");
}
SN_SYMVER_COMPAT(sn_c11_ibv_register_driver, ibv_register_driver, IBVERBS_1.1);

/* ---- rdma-core's provider-facing kernel-command wrappers ----------------------------
 * Providers call these to issue uverbs commands to the kernel.  Behind the emulated NIC
 * there is no kernel device, so each reports EOPNOTSUPP; they exist so that the export
 * table is the one rdma-core has. */
SN_EXPORT bool verbs_allow_disassociate_destroy;

#define NO_KERNEL(name)                  \
    SN_EXPORT int name(void)             \
    {                                    \
        errno = EOPNOTSUPP;              \
        return EOPNOTSUPP;               \
    }

NO_KERNEL(__ioctl_final_num_attrs)
NO_KERNEL(_verbs_init_and_alloc_context)
NO_KERNEL(execute_ioctl)
NO_KERNEL(ibv_cmd_advise_mr)
NO_KERNEL(ibv_cmd_alloc_dm)
NO_KERNEL(ibv_cmd_alloc_mw)
NO_KERNEL(ibv_cmd_alloc_pd)
NO_KERNEL(ibv_cmd_attach_mcast)
NO_KERNEL(ibv_cmd_close_xrcd)
NO_KERNEL(ibv_cmd_create_ah)
NO_KERNEL(ibv_cmd_create_counters)
NO_KERNEL(ibv_cmd_create_cq)
NO_KERNEL(ibv_cmd_create_cq_ex)
NO_KERNEL(ibv_cmd_create_flow)
NO_KERNEL(ibv_cmd_create_flow_action_esp)
NO_KERNEL(ibv_cmd_create_qp)
NO_KERNEL(ibv_cmd_create_qp_ex)
NO_KERNEL(ibv_cmd_create_qp_ex2)
NO_KERNEL(ibv_cmd_create_rwq_ind_table)
NO_KERNEL(ibv_cmd_create_srq)
NO_KERNEL(ibv_cmd_create_srq_ex)
NO_KERNEL(ibv_cmd_create_wq)
NO_KERNEL(ibv_cmd_dealloc_mw)
NO_KERNEL(ibv_cmd_dealloc_pd)
NO_KERNEL(ibv_cmd_dereg_mr)
NO_KERNEL(ibv_cmd_destroy_ah)
NO_KERNEL(ibv_cmd_destroy_counters)
NO_KERNEL(ibv_cmd_destroy_cq)
NO_KERNEL(ibv_cmd_destroy_flow)
NO_KERNEL(ibv_cmd_destroy_flow_action)
NO_KERNEL(ibv_cmd_destroy_qp)
NO_KERNEL(ibv_cmd_destroy_rwq_ind_table)
NO_KERNEL(ibv_cmd_destroy_srq)
NO_KERNEL(ibv_cmd_destroy_wq)
NO_KERNEL(ibv_cmd_detach_mcast)
NO_KERNEL(ibv_cmd_free_dm)
NO_KERNEL(ibv_cmd_get_context)
NO_KERNEL(ibv_cmd_modify_cq)
NO_KERNEL(ibv_cmd_modify_flow_action_esp)
NO_KERNEL(ibv_cmd_modify_qp)
NO_KERNEL(ibv_cmd_modify_qp_ex)
NO_KERNEL(ibv_cmd_modify_srq)
NO_KERNEL(ibv_cmd_modify_wq)
NO_KERNEL(ibv_cmd_open_qp)
NO_KERNEL(ibv_cmd_open_xrcd)
NO_KERNEL(ibv_cmd_poll_cq)
NO_KERNEL(ibv_cmd_post_recv)
NO_KERNEL(ibv_cmd_post_send)
NO_KERNEL(ibv_cmd_post_srq_recv)
NO_KERNEL(ibv_cmd_query_context)
NO_KERNEL(ibv_cmd_query_device_any)
NO_KERNEL(ibv_cmd_query_mr)
NO_KERNEL(ibv_cmd_query_port)
NO_KERNEL(ibv_cmd_query_qp)
NO_KERNEL(ibv_cmd_query_srq)
NO_KERNEL(ibv_cmd_read_counters)
NO_KERNEL(ibv_cmd_reg_dm_mr)
NO_KERNEL(ibv_cmd_reg_dmabuf_mr)
NO_KERNEL(ibv_cmd_reg_mr)
NO_KERNEL(ibv_cmd_req_notify_cq)
NO_KERNEL(ibv_cmd_rereg_mr)
NO_KERNEL(ibv_cmd_resize_cq)
NO_KERNEL(verbs_init_cq)
NO_KERNEL(verbs_open_device)
NO_KERNEL(verbs_set_ops)
NO_KERNEL(verbs_uninit_context)

SN_EXPORT void __verbs_log(void *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}
