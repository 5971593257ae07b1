/* The NIC engine's objects (eng_*.c): what the emulated hardware knows.
 *
 * The engine sees queues only through their engine views (sn_eqp, sn_ecq, sn_esrq): where
 * the queue lives (host or CUDA memory), its size and doorbell record, and the engine's own
 * indices.  It reads WQEs, doorbell records and UAR doorbells back from memory, never from a
 * provider's variables, and delivers events to the descriptors its owner gave it.  The
 * provider (mlx5_*.c, sn.h) builds on this header; nothing here knows the provider
 * (tests/simnic/test_layering.py checks it).
 */
#ifndef SN_ENGINE_H
#define SN_ENGINE_H

#include <endian.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

#include "sn_fabric.h"
#include "sn_log.h"
#include "sn_wire.h"

#define SN_PAGE 4096u
#define SN_BF_OFFSET 0x800u             /* first BlueFlame register of a UAR page */
#define SN_BF_REG_STRIDE 0x200u         /* second register at 0xa00 */
#define SN_BF_BUF 0x100u                /* each register has two 256-byte halves */
#define SN_CQ_DB_OFFSET 0x20u           /* MLX5_CQ_DOORBELL */
#define SN_MAX_SEND_SGE 30
#define SN_MAX_RECV_SGE 30
#define SN_MAX_SQ_DESC 1024u           /* max_wqe_sz_sq: bytes of the largest send WQE */
#define SN_MAX_RQ_DESC 512u            /* max_wqe_sz_rq */
#define SN_MAX_WR 32768
#define SN_MAX_CQE 4194303
#define SN_MAX_MSG (1u << 30)           /* log_max_msg 30 */
#define SN_NUM_COMP_VECTORS 4
#define SN_SND_DBR 1                    /* MLX5_SND_DBR */
#define SN_RCV_DBR 0                    /* MLX5_RCV_DBR */

#define SN_LIKELY(x) __builtin_expect(!!(x), 1)
#define SN_UNLIKELY(x) __builtin_expect(!!(x), 0)

struct sn_engine;
struct sn_pd;                   /* the provider's; the engine keeps the pointer, never follows it */

/* ---- memory: host or CUDA device ------------------------------------------------------ */

struct sn_mem {
    uint8_t gpu;                    /* 1: CUDA device memory, reached with driver copies */
    void *cuctx;                    /* CUcontext owning it */
};

/* Copies between engine-local host buffers and queue/data memory of either kind. */
int sn_mem_read(void *dst, const void *src, size_t len, const struct sn_mem *m);
int sn_mem_write(void *dst, const void *src, size_t len, const struct sn_mem *m);
int sn_mem_copy(void *dst, const struct sn_mem *dm, const void *src, const struct sn_mem *sm,
                size_t len);
/* Classifies ADDR through the CUDA driver when one is loaded in the process. */
void sn_mem_classify(const void *addr, struct sn_mem *m);

/* ---- atomics (eng_atomic.c): the same for every transport ---------------------------------- */

#define SN_AMO_OPMOD_4B 0x08            /* extended atomics: opmod 0x08 | (log2(size) - 2) */
#define SN_AMO_OPMOD_8B 0x09

struct sn_amo {
    uint8_t opcode;                 /* MLX5_OPCODE_ATOMIC_CS / _FA / _MASKED_CS / _MASKED_FA */
    uint8_t size;                   /* operand bytes: 8, or 4 (masked opcodes only) */
    uint64_t swap_add;              /* CS: swap; FA: add (host order) */
    uint64_t compare;
    uint64_t swap_mask;             /* masked FA: the field boundary (plain FA: 0) */
    uint64_t compare_mask;          /* plain CS: all ones */
};

/* DUMP (0x23): the device reads the local bytes its one data segment names and completes, with
 * no request on the wire.  Not in mlx5dv.h; NVSHMEM's IBGDA posts it to make the NIC's earlier
 * writes visible before a quiet returns. */
#define SN_MLX5_OPCODE_DUMP 0x23

/* WQEs that send nothing: they complete in order once everything before them has. */
static inline int sn_is_local_only(uint8_t opcode)
{
    return opcode == MLX5_OPCODE_NOP || opcode == SN_MLX5_OPCODE_DUMP;
}

static inline int sn_is_atomic(uint8_t opcode)
{
    return opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_FA ||
           opcode == MLX5_OPCODE_ATOMIC_MASKED_CS || opcode == MLX5_OPCODE_ATOMIC_MASKED_FA;
}

/* Reads the atomic segment(s) at SEG (the one after the remote-address segment; AVAIL bytes of
 * the WQE from there) of a WQE with OPCODE and OPMOD.  Returns 0 and the 16-byte units they take
 * in *UNITS, or the syndrome of the local error the WQE completes with. */
uint8_t sn_amo_parse(uint8_t opcode, uint8_t opmod, const uint8_t *seg, uint32_t avail,
                     struct sn_amo *a, uint32_t *units);
/* Performs A on the target word at ADDR (host memory, or CUDA memory by copies); the original
 * value in *ORIG.  -1 if the memory could not be reached. */
int sn_amo_execute(void *addr, const struct sn_mem *m, const struct sn_amo *a, uint64_t *orig);
/* The SIZE bytes the requester's local buffer receives for the original value ORIG. */
void sn_amo_result(uint8_t size, uint64_t orig, uint8_t out[8]);

/* ---- devices and UAR pages -------------------------------------------------------------------- */

struct sn_device {
    struct ibv_device ibdev;        /* first: ibv_device * == sn_device * */
    int index;
    uint16_t lid;
    uint64_t guid;                  /* host order */
    union ibv_gid gid;
    struct sn_engine *eng;
    int eng_refs;
};

struct sn_uar {
    uint8_t *page;                  /* SN_PAGE bytes of ordinary memory */
    uint32_t page_id;
    uint32_t refs;
    uint64_t last[5];               /* last value seen at 0x20, 0x800, 0x900, 0xa00, 0xb00 */
    int devx;
    struct sn_uar *next;            /* engine watch list */
    struct sn_uar *cnext;           /* owner's list */
};

/* ---- memory regions, as the engine's key table holds them ----------------------------------- */

struct sn_mr {
    struct ibv_mr ibmr;
    struct sn_pd *pd;
    uint32_t pdn;
    uint64_t iova;
    uint8_t *addr;
    size_t len;
    unsigned access;
    struct sn_mem mem;
};

/* ---- engine views of queues ---------------------------------------------------------------- */

struct sn_ecq {
    uint32_t cqn;
    uint8_t *buf;                   /* CQE64 ring */
    uint32_t cnt;                   /* entries, power of two */
    uint32_t log_cnt;
    __be32 *dbrec;                  /* [0] consumer index, [1] arm word */
    struct sn_mem bufm, dbm;
    uint32_t pi;                    /* engine's producer index */
    uint32_t ci_seen;               /* last consumer index read from dbrec */
    uint32_t arm_word;              /* last arm word seen */
    uint8_t armed;                  /* 1: next CQE, 2: next solicited CQE */
    uint8_t overrun;
    uint8_t ignore_overrun;         /* created so: CQEs are written whatever the consumer index */
    uint8_t collapsed;              /* DevX cqc.cc: every CQE is written to entry 0 */
    uint8_t cqe_shift;              /* log2 CQE size: 6, or 7 (128-byte CQEs); 0 reads as 6 */
    /* events, as the owner set them up (a DevX CQ has none: ev_obj NULL) */
    void *ev_obj;                   /* the struct ibv_cq named in its events */
    int comp_fd;                    /* write end of its completion channel, or -1 */
    int async_fd;                   /* write end of its context's asynchronous event pipe */
    struct sn_ecq *next;            /* engine list */
};

struct sn_esrq {
    uint32_t srqn;
    uint8_t *buf;
    uint32_t cnt;
    uint32_t shift;                 /* log2 WQE stride */
    __be32 *dbrec;                  /* [0] WQE counter */
    struct sn_mem bufm, dbm;
    uint16_t hw_head;               /* next WQE to consume (follows next_wqe_index) */
    uint16_t consumed;
    uint8_t cyclic;                 /* DevX RMP of cyclic topology: WQEs taken in ring order */
    uint32_t pdn;
    struct sn_esrq *next;
};

struct sn_sge {
    uint64_t addr;
    uint32_t len;
    uint32_t lkey;                  /* SN_INLINE_LKEY: addr is the engine's copy of inline data */
};
#define SN_INLINE_LKEY MLX5_INVALID_LKEY    /* never a memory key */

/* A send WQE as read from the SQ once, kept until it completes (retransmission, READ and
 * atomic results need it). */
struct sn_swqe {
    uint32_t bb;                    /* 32-bit counter of its first basic block */
    uint16_t nbb;
    uint16_t wqe_idx;               /* index from the control segment */
    uint8_t opcode;                 /* MLX5_OPCODE_* */
    uint8_t fm_ce_se;
    uint8_t nsge;
    uint8_t inl;                    /* one of the sges is the WQE's inline data */
    uint8_t err;                    /* local error syndrome found when parsing, 0 if none */
    uint8_t acked;
    uint8_t amo_size;               /* atomics: operand bytes (4 or 8) */
    uint8_t pad;
    uint32_t imm;
    uint32_t rkey;
    uint64_t raddr;
    uint64_t swap_add, compare;
    uint64_t swap_mask, compare_mask;   /* masked atomics (struct sn_amo) */
    uint32_t len;
    uint32_t psn;
    uint32_t npsn;
    uint32_t got;                   /* READ: bytes of response received */
    uint64_t orig;                  /* ATOMIC: returned value */
    /* UD and DC: the address vector of the WQE's datagram segment (DC: ud_dqpn is the DCT
     * number, dc_key its access key) */
    uint32_t ud_dqpn;
    uint32_t ud_qkey;
    uint16_t ud_dlid;
    uint8_t ud_grh;                 /* the AV asks for a global route header */
    uint8_t ud_tclass, ud_hop_limit;
    uint32_t ud_flow_label;
    uint8_t ud_dgid[16];
    uint64_t dc_key;
    struct sn_sge sge[];
};

/* A receive WQE being filled by an inbound SEND or consumed by WRITE_IMM. */
struct sn_rwqe {
    uint16_t idx;                   /* RQ index or SRQ WQE index */
    uint8_t nsge;
    uint8_t from_srq;
    struct sn_sge sge[SN_MAX_RECV_SGE];
};

struct sn_peer;

/* DCI: a requester that reaches any DCT, the one each WQE's address vector names; DCT: the
 * responder every DCI with its access key reaches (sn_dc_* below). */
enum { SN_QPT_RC = 0, SN_QPT_UC = 1, SN_QPT_UD = 2, SN_QPT_DCI = 3, SN_QPT_DCT = 4 };

/* RC and DCI: requests are acknowledged, retransmitted and completed in PSN order */
static inline int sn_qpt_reliable(uint8_t type)
{
    return type == SN_QPT_RC || type == SN_QPT_DCI;
}

struct sn_eqp {
    uint32_t qpn;
    uint8_t type;                   /* SN_QPT_RC / SN_QPT_UC / SN_QPT_UD */
    uint8_t devx;
    uint8_t direct;                 /* the program writes its WQEs and rings the UAR itself
                                     * (DevX, or handed out by mlx5dv_init_obj) */
    uint8_t sq_signal_all;
    _Atomic int state;              /* IBV_QPS_*: the engine's (hardware) state */
    uint32_t pdn;
    uint32_t uidx;
    struct sn_uar *uar;             /* the page its doorbells are rung on */
    void *ev_obj;                   /* the struct ibv_qp named in its events; NULL: none (DevX) */
    int async_fd;                   /* write end of its context's asynchronous event pipe */
    struct sn_devx_sub *devx_subs;  /* DevX QP: event channels subscribed to its events */

    /* send queue */
    uint8_t *sq_buf;
    uint32_t sq_cnt;                /* basic blocks, power of two */
    __be32 *dbrec;                  /* [0] RQ counter, [1] SQ counter */
    struct sn_mem sqm, dbm;
    uint32_t sq_pi;                 /* BBs announced by doorbells */
    uint32_t sq_parsed;             /* BBs parsed into swqe records */
    uint32_t sq_tx;                 /* first BB of the WQE being transmitted */
    uint32_t tx_off;                /* its bytes already transmitted */
    uint32_t sq_acked;              /* first BB of the oldest WQE not completed */
    uint32_t next_psn;
    uint8_t *swqe_area;
    uint32_t swqe_stride;
    uint32_t max_sge;
    uint8_t *inl_area;              /* inline payload copies, 64 bytes per BB */
    uint64_t progress_ns;           /* last time the remote side made progress */
    uint64_t rnr_until_ns;          /* RNR wait before resending */
    uint32_t retries, rnr_retries;
    uint8_t flush_sq, flush_rq;     /* error state: flush what is posted */

    /* receive queue */
    uint8_t *rq_buf;
    uint32_t rq_cnt;
    uint32_t rq_shift;
    struct sn_mem rqm;
    uint32_t rq_ci;                 /* receive WQEs consumed */
    struct sn_esrq *srq;
    struct sn_ecq *scq, *rcq;

    /* connection */
    uint32_t dest_qpn;
    uint16_t dlid;
    uint8_t dgid[16];
    uint8_t is_global;
    uint8_t mtu;                    /* IBV_MTU_* */
    uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
    uint8_t max_rd_atomic, max_dest_rd_atomic;
    unsigned access;                /* IBV_ACCESS_REMOTE_* accepted as responder */
    uint32_t sq_psn_init, rq_psn_init;
    uint32_t qkey;                  /* UD: datagrams with another Q_Key are dropped */
    struct sn_peer *peer;

    /* DC.  DCI: the connection its WQEs use now (peer, dest_qpn = DCT number, and the key
     * it was opened with).  DCT: its access key and the responder contexts of the DCIs that
     * connected to it (dc_conns).  A responder context (dc_parent set) is a queue of its own,
     * kept out of the engine's tables, that answers one DCI as an RC responder would. */
    uint64_t dc_key;
    uint64_t dc_cur_key;
    uint8_t dc_reconnect;           /* DCI: a timeout's retransmission opens the connection anew */
    struct sn_eqp *dc_conns;
    struct sn_eqp *dc_parent;
    struct sn_eqp *dc_next;

    /* responder */
    uint32_t exp_psn;
    uint8_t nak_wait;               /* dropped a message: wait for its retransmission */
    uint8_t in_active;              /* a multi-fragment message is being received */
    uint8_t in_type, in_opcode;
    uint8_t in_se;                  /* the message asks for a solicited event */
    uint32_t in_psn, in_total, in_got, in_imm;
    uint64_t in_raddr;
    uint32_t in_rkey;               /* looked up again per fragment: the MR may go away */
    struct sn_rwqe in_rwqe;
    uint8_t in_have_rwqe;
    uint8_t in_dup;                 /* READ being answered again (retransmitted request) */
    uint32_t in_npsn;
    uint8_t ack_pending;
    uint32_t ack_psn;
    struct {
        uint32_t psn;
        uint64_t val;
    } atomic_cache[8];
    uint32_t atomic_next;

    struct sn_eqp *hnext;           /* engine hash chain */
    struct sn_eqp *next;            /* engine list */
};

/* The CQE64 of ring entry IDX.  A 128-byte CQE keeps its CQE64 in the second half (the first
 * half is where hardware scatters small payloads, which the emulated NIC never does). */
static inline struct mlx5_cqe64 *sn_cqe64_at(uint8_t *buf, uint32_t cnt, uint8_t shift, uint32_t idx)
{
    size_t size = (size_t)1 << (shift ? shift : 6);

    return (struct mlx5_cqe64 *)(buf + (size_t)(idx & (cnt - 1)) * size + size - 64);
}

static inline struct sn_swqe *sn_swqe_at(struct sn_eqp *q, uint32_t bb)
{
    return (struct sn_swqe *)(q->swqe_area + (size_t)(bb & (q->sq_cnt - 1)) * q->swqe_stride);
}

/* ---- engine --------------------------------------------------------------------------------- */

struct sn_peer {
    uint16_t lid;
    struct sn_owner owner;
    struct sn_inbox *ib;
    size_t ib_len;
    int slot;
    struct sn_ring req;             /* my requests into its inbox */
    struct sn_ring resp;            /* my responses into its inbox */
    uint8_t req_dirty, resp_dirty;  /* reserved records not yet published */
    uint8_t dead;
    uint64_t checked_ns;
    struct sn_peer *next;
};

#define SN_QP_HASH 1024

struct sn_engine {
    uint32_t n_dbg_doorbells;        /* SIMNIC_DEBUG: doorbells logged */
    struct sn_device *dev;
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t lock;           /* held by the engine for one pass; by control verbs */
    uint16_t lid;
    struct sn_inbox *inbox;
    size_t inbox_len;
    struct sn_ring rx_req[SN_INBOX_SLOTS];
    struct sn_ring rx_resp[SN_INBOX_SLOTS];
    struct sn_owner rx_owner[SN_INBOX_SLOTS];
    uint16_t rx_lid[SN_INBOX_SLOTS];
    uint8_t rx_on[SN_INBOX_SLOTS];
    uint8_t rx_blocked[SN_INBOX_SLOTS];
    struct sn_peer *peers;
    struct sn_uar *uars;
    struct sn_eqp *qp_hash[SN_QP_HASH];
    struct sn_eqp *qps;
    struct sn_ecq *cqs;
    struct sn_esrq *srqs;
    struct sn_mr **mrs;
    uint32_t mr_cap;
    uint32_t next_pdn, next_cqn, next_srqn, next_uar_id, next_umem_id, next_obj;
    struct sn_eqp *ackq[64];                /* QPs owing their requester an ACK */
    int nackq;
    uint64_t now_ns;
    uint64_t last_timer_ns;
    uint64_t last_slot_scan_ns;
    /* counters, printed at exit with SIMNIC_DEBUG=1 */
    uint64_t n_wqes, n_msgs_tx, n_msgs_rx, n_cqes, n_sleeps, n_bad_doorbells, n_errors;
    uint64_t n_assists;
    uint64_t n_ud_dropped;          /* datagrams dropped: no receive, Q_Key, MTU, no port */
    uint64_t n_dc_key_violations;   /* DC connections refused: the DCT has another key */
    uint32_t n_gpu_objects;         /* queues in CUDA memory: no polling assist */
    uint32_t n_direct_qps;          /* QPs with `direct` set: doorbells nobody announces */
};

/* eng_core.c */
struct sn_engine *sn_engine_get(struct sn_device *dev);
void sn_engine_put(struct sn_device *dev);
void sn_engine_kick(struct sn_engine *eng);
void sn_engine_assist(struct sn_engine *eng);
/* engine lock held: the work Q's move to ERR must not overtake (see eng_core.c) */
void sn_engine_settle(struct sn_engine *eng, struct sn_eqp *q);
void sn_engine_add_uar(struct sn_engine *eng, struct sn_uar *uar);
void sn_engine_del_uar(struct sn_engine *eng, struct sn_uar *uar);
void sn_engine_add_qp(struct sn_engine *eng, struct sn_eqp *q);
void sn_engine_del_qp(struct sn_engine *eng, struct sn_eqp *q);
/* engine lock held: the program posts to Q itself from now on (mlx5dv_init_obj) */
void sn_engine_qp_direct(struct sn_engine *eng, struct sn_eqp *q);
struct sn_eqp *sn_engine_find_qp(struct sn_engine *eng, uint32_t qpn);
void sn_engine_add_cq(struct sn_engine *eng, struct sn_ecq *cq);
void sn_engine_del_cq(struct sn_engine *eng, struct sn_ecq *cq);
struct sn_ecq *sn_engine_find_cq(struct sn_engine *eng, uint32_t cqn);
void sn_engine_add_srq(struct sn_engine *eng, struct sn_esrq *s);
void sn_engine_del_srq(struct sn_engine *eng, struct sn_esrq *s);
struct sn_esrq *sn_engine_find_srq(struct sn_engine *eng, uint32_t srqn);
int sn_engine_add_mr(struct sn_engine *eng, struct sn_mr *mr);  /* sets lkey/rkey */
void sn_engine_del_mr(struct sn_engine *eng, struct sn_mr *mr);
struct sn_mr *sn_engine_find_mr(struct sn_engine *eng, uint32_t key);
uint64_t sn_now_ns(void);
/* at exit: stops DEV's engine whatever its references (the program never closed it) */
void sn_engine_shutdown(struct sn_device *dev);
/* in a forked child: the engines of the parent are not the child's */
void sn_fork_child_reset(void);

/* eng_qp.c: connection state changes made by control verbs (engine lock held) */
int sn_eqp_connect(struct sn_engine *eng, struct sn_eqp *q);
void sn_eqp_reset(struct sn_engine *eng, struct sn_eqp *q);
void sn_eqp_to_error(struct sn_engine *eng, struct sn_eqp *q);
int sn_eqp_alloc_tracking(struct sn_eqp *q, uint32_t max_sge);
void sn_eqp_free_tracking(struct sn_eqp *q);

/* eng_resp.c: DC responder contexts (engine lock held) */
void sn_dc_forget_conns(struct sn_engine *eng, struct sn_eqp *dct);

/* eng_req.c / eng_resp.c: one pass of the requester and responder */
int sn_req_progress(struct sn_engine *eng);
int sn_req_doorbell(struct sn_engine *eng, struct sn_eqp *q, uint32_t pi16);
int sn_req_handle_resp(struct sn_engine *eng, struct sn_peer *p, const struct sn_msg *m);
int sn_req_timers(struct sn_engine *eng);
int sn_resp_handle(struct sn_engine *eng, int slot, const struct sn_msg *m, struct sn_peer *p);
int sn_resp_flush_acks(struct sn_engine *eng);
void sn_resp_forget(struct sn_engine *eng, struct sn_eqp *q);
struct sn_peer *sn_peer_get(struct sn_engine *eng, uint16_t lid);
void sn_flush_qp(struct sn_engine *eng, struct sn_eqp *q);

/* eng_cqe.c */
void sn_cqe_req(struct sn_engine *eng, struct sn_eqp *q, const struct sn_swqe *w,
                uint8_t syndrome);
void sn_cqe_resp(struct sn_engine *eng, struct sn_eqp *q, uint8_t op, uint32_t byte_cnt,
                 uint32_t imm, uint16_t wqe_counter, uint8_t syndrome, uint16_t slid,
                 uint32_t src_qpn, int solicited);
/* a UD receive: the sender's address, and bit 0 of GRH: a global route header came with it */
void sn_cqe_resp_ud(struct sn_engine *eng, struct sn_eqp *q, uint8_t op, uint32_t byte_cnt,
                    uint32_t imm, uint16_t wqe_counter, uint16_t slid, uint32_t src_qpn, int grh,
                    int solicited);
void sn_ecq_arm(struct sn_engine *eng, struct sn_ecq *cq, uint32_t word);
void sn_async_event(struct sn_engine *eng, struct sn_eqp *q, enum ibv_event_type type);

/* A DevX event channel's subscription to one event of a QP (mlx5dv_devx_subscribe_devx_event):
 * the engine writes {cookie} or {cookie, EQE} to FD, or adds 1 to the eventfd FD. */
struct sn_devx_sub {
    uint16_t event;                 /* PRM event type (MLX5_EVENT_TYPE_*) */
    uint8_t omit_data;              /* the channel's OMIT_EV_DATA */
    uint8_t to_eventfd;
    int fd;
    uint64_t cookie;
    uint32_t qpn;
    struct sn_devx_sub *next;       /* the QP's list (engine lock) */
    struct sn_devx_sub *ch_next;    /* the channel's list */
    struct sn_eqp *qp;
    struct sn_engine *eng;
};
void sn_devx_event(struct sn_eqp *q, enum ibv_event_type type);

/* What the engine writes into a context's asynchronous event pipe; its owner reads it back
 * in ibv_get_async_event. */
struct sn_async_rec {
    uint32_t type;                  /* enum ibv_event_type */
    uint32_t pad;
    void *obj;                      /* the QP, CQ or SRQ of the event, or the port number */
};

#endif
