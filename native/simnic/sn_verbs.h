/* The provider's verbs, across the mlx5_*.c files (all hidden; reached through the
 * provider ops table, the context's ops table and verbs_context). */
#ifndef SN_VERBS_H
#define SN_VERBS_H

#include "sn.h"

/* mlx5_dev.c */
struct ibv_device **sn_get_device_list(int *num);
struct ibv_context *sn_open_device(struct ibv_device *dev);
int sn_is_our_device(struct ibv_device *dev);
int sn_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr);
int sn_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);

/* mlx5_mr.c */
struct ibv_pd *sn_alloc_pd(struct ibv_context *ctx);
int sn_dealloc_pd(struct ibv_pd *pd);
struct ibv_pd *sn_alloc_parent_domain(struct ibv_context *c, struct ibv_parent_domain_init_attr *attr);
struct ibv_mr *sn_reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access);
int sn_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access);
int sn_dereg_mr(struct ibv_mr *mr);
struct ibv_ah *sn_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int sn_destroy_ah(struct ibv_ah *ah);
int sn_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int sn_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
struct ibv_mw *sn_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int sn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
int sn_dealloc_mw(struct ibv_mw *mw);

/* mlx5_pin.c */
int sn_range_pinnable(const void *addr, size_t len, unsigned access);

/* mlx5_cq.c */
struct ibv_comp_channel *sn_create_comp_channel(struct ibv_context *ctx);
int sn_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *sn_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                            struct ibv_comp_channel *ch, int comp_vector);
struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
struct ibv_cq_ex *sn_create_cq_ex_sized(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr,
                                        unsigned cqe_size);
int sn_resize_cq(struct ibv_cq *cq, int cqe);
int sn_destroy_cq(struct ibv_cq *cq);
int sn_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sn_req_notify_cq(struct ibv_cq *cq, int solicited);
int sn_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
void sn_ack_cq_events(struct ibv_cq *cq, unsigned n);
void sn_cq_clean(struct sn_cq *cq, uint32_t qpn, struct sn_srq *srq);

/* mlx5_qp.c */
struct ibv_qp *sn_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
struct ibv_qp *sn_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
/* DC_TYPE 0 or MLX5DV_DCTYPE_*: mlx5dv_create_qp's DC QPs (IBV_QPT_DRIVER) */
struct ibv_qp *sn_create_qp_dc(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr, int dc_type,
                               uint64_t dct_key);
int sn_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);
int sn_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int sn_destroy_qp(struct ibv_qp *qp);
struct ibv_qp_ex *sn_qp_to_qp_ex(struct ibv_qp *qp);
int sn_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags);
int sn_set_ece(struct ibv_qp *qp, struct ibv_ece *ece);
int sn_query_ece(struct ibv_qp *qp, struct ibv_ece *ece);
struct ibv_srq *sn_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int sn_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
int sn_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int sn_destroy_srq(struct ibv_srq *srq);
int sn_get_srq_num(struct ibv_srq *srq, uint32_t *num);
void sn_srq_free_wqe(struct sn_srq *srq, int idx);

/* mlx5_post.c */
int sn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sn_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
void sn_qp_init_send_ops(struct sn_qp *qp);
void sn_ring_doorbell(struct sn_qp *qp, struct mlx5_wqe_ctrl_seg *ctrl, uint32_t nreq,
                      uint32_t size16, int inl);

#endif
