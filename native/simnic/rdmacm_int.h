/* The emulated librdmacm.so.1: internal state shared by its source files.
 *
 * There is no kernel rdma_cm behind it.  Connection management runs between processes of
 * one user on one host over Unix SOCK_SEQPACKET sockets in the abstract namespace, one
 * socket per connection; a listener is a socket named after the fabric, the port space and
 * the port ("simnic.<uid>.<fabric>.cm.<ps>.<port>").  Every local IP address (loopback
 * included) is an address of the first emulated device, mlx5_0 port 1 (see rdmacm_addr.c).
 * An event channel's fd is an epoll descriptor that watches the channel's connection and
 * listening sockets plus an eventfd for events made locally, so it polls as the kernel's
 * does; rdma_get_cm_event turns one ready message into one event. */
#ifndef RDMACM_INT_H
#define RDMACM_INT_H

#include <pthread.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define RC_PDATA_MAX 256

enum rc_state {
    RC_IDLE,
    RC_BOUND,
    RC_LISTEN,
    RC_ADDR_RESOLVED,
    RC_ROUTE_RESOLVED,
    RC_CONNECTING,          /* REQ sent, waiting REP */
    RC_REP_RCVD,            /* REP received, no QP on the id: waiting rdma_establish */
    RC_REQ_RCVD,            /* passive side before accept */
    RC_ACCEPTED,            /* REP sent, waiting RTU */
    RC_CONNECTED,
    RC_DISCONNECTING,       /* DREQ sent */
    RC_DISCONNECTED,
};

enum rc_msg_type { RC_REQ = 1, RC_REP, RC_RTU, RC_REJ, RC_DREQ, RC_DREP };

/* One connection-management message (one SOCK_SEQPACKET datagram). */
struct rc_msg {
    uint32_t type;
    int32_t status;                     /* REJ: reason */
    uint32_t qpn;
    uint32_t psn;
    uint16_t lid;
    uint8_t gid[16];
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t flow_control;
    uint8_t retry_count;
    uint8_t rnr_retry_count;
    uint8_t srq;
    uint32_t pdata_len;
    struct sockaddr_storage src;
    struct sockaddr_storage dst;
    uint8_t pdata[RC_PDATA_MAX];
};

struct rc_event {
    struct rdma_cm_event ev;
    struct rc_event *next;
    struct rc_id *counted;              /* the id whose rdma_destroy_id waits for this event's ack */
    uint8_t pdata[RC_PDATA_MAX];
};

struct rc_channel {
    struct rdma_event_channel ch;       /* ch.fd: the epoll descriptor */
    int evfd;                           /* counts queued local events (EFD_SEMAPHORE) */
    struct rc_event *head, *tail;
    int waiters;                        /* threads inside rdma_get_cm_event on the channel */
    int dead;                           /* destroyed while a thread waited: the last one frees it */
    struct rc_channel *live_next;       /* the list of channels not yet destroyed */
};

struct rc_id {
    struct rdma_cm_id id;
    struct rc_channel *chan;
    int sync;                           /* created without a channel: calls wait for events */
    int sock;                           /* listening or connection socket, -1 */
    int in_epoll;
    enum rc_state state;
    uint32_t psn;
    struct rc_msg peer;                 /* the peer's REQ or REP */
    struct ibv_sa_path_rec path;
    int own_cqs;                        /* rdma_create_qp made the CQs and channels */
    struct rc_event *req_event;         /* rdma_get_request's event, acked on accept/reject */
    struct ibv_pd *ep_pd;               /* a passive rdma_create_ep's QP for each request */
    struct ibv_qp_init_attr *ep_qp_attr;
    uint64_t serial;                    /* names the id in its channel's epoll (never reused) */
    struct rc_id *live_next;            /* the list of ids not yet destroyed */
    unsigned events_out;                /* events handed out by rdma_get_cm_event, not yet acked */
};

extern pthread_mutex_t rc_lock;

static inline struct rc_id *rc_of(struct rdma_cm_id *id)
{
    return (struct rc_id *)id;
}

/* rdmacm_addr.c */
int rc_addr_is_local(const struct sockaddr *sa);
int rc_addr_is_any(const struct sockaddr *sa);
socklen_t rc_addr_len(const struct sockaddr *sa);
uint16_t rc_addr_port(const struct sockaddr *sa);
void rc_addr_set_port(struct sockaddr *sa, uint16_t port);
struct ibv_context *rc_device(void);
struct ibv_pd *rc_default_pd(struct ibv_context *ctx);
int rc_listen_name(int ps, uint16_t port, struct sockaddr_un *un, socklen_t *len);

/* rdmacm_cm.c */
void rc_queue_event(struct rc_id *r, enum rdma_cm_event_type type, int status,
                    const struct rc_msg *m);
int rc_sync_wait(struct rc_id *r, enum rdma_cm_event_type want);

/* rdmacm_qp.c */
int rc_qp_to_init(struct rc_id *r);
int rc_qp_to_rts(struct rc_id *r);
int rc_qp_to_err(struct rc_id *r);
void rc_fill_qp_attr(struct rc_id *r, enum ibv_qp_state state, struct ibv_qp_attr *a, int *mask);

#endif
