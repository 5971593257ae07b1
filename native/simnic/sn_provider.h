/* The private interface between the emulated libibverbs.so.1 (generic verbs layer) and the
 * emulated libmlx5.so.1 (the mlx5 provider, the NIC engine and mlx5dv).
 *
 * As in rdma-core, libibverbs loads the provider library when the device list is first asked
 * for, and the provider's constructor registers itself through verbs_register_driver_34().
 * The structure passed there is ours (not rdma-core's verbs_device_ops): both libraries are
 * always built and shipped together.
 */
#ifndef SN_PROVIDER_H
#define SN_PROVIDER_H

#include <infiniband/verbs.h>

#define SN_PROVIDER_ABI 3

/* rdma-core's struct _compat_ibv_port_attr, what the exported ibv_query_port@IBVERBS_1.1
 * fills: struct ibv_port_attr up to and including `flags` (48 bytes). */
#define SN_COMPAT_PORT_ATTR_LEN (offsetof(struct ibv_port_attr, flags) + 1)

struct sn_provider_ops {
    unsigned abi;
    const char *name;

    /* devices */
    struct ibv_device **(*get_device_list)(int *num);
    __be64 (*device_guid)(struct ibv_device *dev);
    int (*device_index)(struct ibv_device *dev);
    /* emulated sysfs files below a device's ibdev_path; -1/ENOENT when not ours */
    int (*read_sysfs)(const char *dir, const char *file, char *buf, size_t size);

    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
    void (*ack_async_event)(struct ibv_async_event *ev);

    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
                      size_t attr_len);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
    int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
    ssize_t (*query_gid_table)(struct ibv_context *ctx, struct ibv_gid_entry *entries,
                               size_t max, uint32_t flags, size_t entry_size);
    int (*query_pkey)(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey);

    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
                             unsigned access);
    int (*rereg_mr)(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                    size_t len, int access);
    int (*dereg_mr)(struct ibv_mr *mr);

    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
                                struct ibv_comp_channel *ch, int comp_vector);
    int (*resize_cq)(struct ibv_cq *cq, int cqe);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned n);

    struct ibv_srq *(*create_srq)(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
    int (*modify_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
    int (*query_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr);
    int (*destroy_srq)(struct ibv_srq *srq);

    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                    struct ibv_qp_init_attr *init);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    struct ibv_qp_ex *(*qp_to_qp_ex)(struct ibv_qp *qp);
    int (*query_qp_data_in_order)(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags);
    int (*set_ece)(struct ibv_qp *qp, struct ibv_ece *ece);
    int (*query_ece)(struct ibv_qp *qp, struct ibv_ece *ece);

    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*destroy_ah)(struct ibv_ah *ah);
    int (*attach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
    int (*detach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
};

#endif
