/* Provider layers above verbs (UCX's UCP and UCT, libfabric) and the functions of each that the
 * tracer hooks: the `aux` (layer) and `op` (function) of ST_REC_CALL / ST_REC_CALL_END records.
 *
 * One X-macro list per layer, so the runtime, the agent's tables and the Python mirror
 * (sigmatrace/trace/layers.py, checked by tests/test_format_abi.py) never disagree.  Numbers
 * are part of the trace format: append, never renumber.
 */
#ifndef SIGMATRACE_LAYERS_H
#define SIGMATRACE_LAYERS_H

/* `aux` of a CALL record.  The verbs, mlx5, cuda and cxi layers have record types of their own. */
enum st_layer {
    ST_LAYER_NONE = 0,
    ST_LAYER_UCP = 1,       /* libucp.so: ucp_*_nb* */
    ST_LAYER_UCT = 2,       /* libuct*.so: the functions UCT's endpoint ops tables point at */
    ST_LAYER_LIBFABRIC = 3, /* libfabric.so: endpoint ops tables (msg, rma, tagged, atomic) */
    ST_LAYER_MAX = 4,
};

/* X(id, name): `op` of a CALL record of the UCP layer; name is the exported function's. */
#define ST_UCP_FUNCTIONS(X)             \
    X(1, ucp_put_nbx)                   \
    X(2, ucp_get_nbx)                   \
    X(3, ucp_put_nbi)                   \
    X(4, ucp_get_nbi)                   \
    X(5, ucp_atomic_op_nbx)             \
    X(6, ucp_tag_send_nbx)              \
    X(7, ucp_tag_send_sync_nbx)         \
    X(8, ucp_tag_recv_nbx)              \
    X(9, ucp_am_send_nbx)               \
    X(10, ucp_stream_send_nbx)          \
    X(11, ucp_stream_recv_nbx)          \
    X(12, ucp_ep_flush_nbx)             \
    X(13, ucp_worker_flush_nbx)

/* UCT endpoint operations, named by the uct_ep_* call they implement; the hook sits on the
 * transport's exported function (uct_rc_mlx5_ep_put_short, uct_rc_verbs_ep_put_short, ...). */
#define ST_UCT_FUNCTIONS(X)             \
    X(1, put_short)                     \
    X(2, put_bcopy)                     \
    X(3, put_zcopy)                     \
    X(4, get_bcopy)                     \
    X(5, get_zcopy)                     \
    X(6, am_short)                      \
    X(7, am_short_iov)                  \
    X(8, am_bcopy)                      \
    X(9, am_zcopy)                      \
    X(10, atomic_cswap64)               \
    X(11, atomic_cswap32)               \
    X(12, atomic32_post)                \
    X(13, atomic64_post)                \
    X(14, atomic32_fetch)               \
    X(15, atomic64_fetch)               \
    X(16, tag_eager_short)              \
    X(17, tag_eager_bcopy)              \
    X(18, tag_eager_zcopy)              \
    X(19, tag_rndv_zcopy)               \
    X(20, flush)                        \
    X(21, fence)

/* libfabric endpoint operations, named by the fi_* call (the ops-table slot) they implement. */
#define ST_LIBFABRIC_FUNCTIONS(X)       \
    X(1, fi_send)                       \
    X(2, fi_sendv)                      \
    X(3, fi_sendmsg)                    \
    X(4, fi_inject)                     \
    X(5, fi_senddata)                   \
    X(6, fi_injectdata)                 \
    X(7, fi_recv)                       \
    X(8, fi_recvv)                      \
    X(9, fi_recvmsg)                    \
    X(10, fi_write)                     \
    X(11, fi_writev)                    \
    X(12, fi_writemsg)                  \
    X(13, fi_inject_write)              \
    X(14, fi_writedata)                 \
    X(15, fi_inject_writedata)          \
    X(16, fi_read)                      \
    X(17, fi_readv)                     \
    X(18, fi_readmsg)                   \
    X(19, fi_tsend)                     \
    X(20, fi_tsendv)                    \
    X(21, fi_tsendmsg)                  \
    X(22, fi_tinject)                   \
    X(23, fi_tsenddata)                 \
    X(24, fi_tinjectdata)               \
    X(25, fi_trecv)                     \
    X(26, fi_trecvv)                    \
    X(27, fi_trecvmsg)                  \
    X(28, fi_atomic)                    \
    X(29, fi_atomicv)                   \
    X(30, fi_atomicmsg)                 \
    X(31, fi_inject_atomic)             \
    X(32, fi_fetch_atomic)              \
    X(33, fi_fetch_atomicv)             \
    X(34, fi_fetch_atomicmsg)           \
    X(35, fi_compare_atomic)            \
    X(36, fi_compare_atomicv)           \
    X(37, fi_compare_atomicmsg)

#define ST_LAYER_FN_ENUM_(layer, id, name) ST_##layer##_##name = id,
#define ST_UCP_FN_(id, name) ST_LAYER_FN_ENUM_(UCP, id, name)
#define ST_UCT_FN_(id, name) ST_LAYER_FN_ENUM_(UCT, id, name)
#define ST_FI_FN_(id, name) ST_LAYER_FN_ENUM_(FI, id, name)
enum st_ucp_fn { ST_UCP_FUNCTIONS(ST_UCP_FN_) };
enum st_uct_fn { ST_UCT_FUNCTIONS(ST_UCT_FN_) };
enum st_fi_fn { ST_LIBFABRIC_FUNCTIONS(ST_FI_FN_) };

/* `extra` of a CALL_END whose call's send-queue entries are known: a flag, then the 16-bit
 * producer index (wqe index, in 64-byte basic blocks) before and after the call. */
#define ST_CALL_WQE_RANGE_VALID (1ull << 63)
#define ST_CALL_WQE_RANGE(pi_start, pi_end) \
    (ST_CALL_WQE_RANGE_VALID | ((uint64_t)((pi_end) & 0xffff) << 16) | (uint64_t)((pi_start) & 0xffff))

#endif
