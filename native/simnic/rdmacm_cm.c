/* Event channels, ids and the connection protocol of the emulated librdmacm.
 *
 * The messages follow the IB CM's: the active side sends REQ (its QP number, PSN, LID, GID,
 * resources, private data), the passive side answers REP or REJ, the active side confirms
 * with RTU; DREQ / DREP end a connection.  A socket closed by the peer (its id destroyed or
 * its process gone) ends the connection too.  Private data lengths are those of the IB CM
 * under the RDMA_PS_TCP header: up to 56 bytes on REQ, 196 on REP, 148 on REJ; events report
 * those full lengths, zero-padded, as the kernel does. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rdmacm_int.h"
#include "sn_export.h"

#define PDATA_REQ 56
#define PDATA_REP 196
#define PDATA_REJ 148
#define PDATA_DREQ 220
#define REJ_INVALID_SERVICE_ID 8
#define REJ_CONSUMER_DEFINED 28

static int rc_fail(int e)
{
    errno = e;
    return -1;
}

/* ---- event channels ------------------------------------------------------------------ */

static struct rc_channel *rc_chan(struct rdma_event_channel *ch)
{
    return (struct rc_channel *)ch;
}

/* Event dispatch and teardown exclude each other, as the kernel's rdma_cm makes them:
 * - a thread woken by an id's socket dispatches only if the id is still live, looked up by its
 *   serial (an address can be reused, a serial cannot);
 * - rdma_destroy_id waits until every event it handed out for the id is acked;
 * - a channel destroyed while a thread waits in rdma_get_cm_event leaves that thread waiting
 *   for good, as the kernel's does, and a call that starts after the destruction fails with
 *   EBADF without touching the freed channel.
 * Recursive: a listener's dispatch creates (registers) the child id. */
static pthread_mutex_t rc_dispatch_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_cond_t rc_acked = PTHREAD_COND_INITIALIZER;
static struct rc_id *rc_live_ids;
static struct rc_channel *rc_live_channels;
static uint64_t rc_serials;

static void rc_register_id(struct rc_id *r)
{
    pthread_mutex_lock(&rc_dispatch_lock);
    r->serial = ++rc_serials;
    r->live_next = rc_live_ids;
    rc_live_ids = r;
    pthread_mutex_unlock(&rc_dispatch_lock);
}

static void rc_forget_id(struct rc_id *r)
{
    pthread_mutex_lock(&rc_dispatch_lock);
    for (struct rc_id **pp = &rc_live_ids; *pp; pp = &(*pp)->live_next)
        if (*pp == r) {
            *pp = r->live_next;
            break;
        }
    pthread_mutex_unlock(&rc_dispatch_lock);
}

static struct rc_id *rc_find_id(uint64_t serial)
{
    for (struct rc_id *r = rc_live_ids; r; r = r->live_next)
        if (r->serial == serial)
            return r;
    return NULL;
}

/* Whether C is a channel not yet destroyed (call with rc_dispatch_lock held). */
static int rc_channel_live(struct rc_channel *c)
{
    for (struct rc_channel *l = rc_live_channels; l; l = l->live_next)
        if (l == c)
            return 1;
    return 0;
}

static void rc_free_channel(struct rc_channel *c)
{
    while (c->head) {
        struct rc_event *e = c->head;
        c->head = e->next;
        free(e);
    }
    close(c->ch.fd);
    close(c->evfd);
    free(c);
}

SN_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
    struct rc_channel *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    c->ch.fd = epoll_create1(EPOLL_CLOEXEC);
    c->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (c->ch.fd < 0 || c->evfd < 0 || epoll_ctl(c->ch.fd, EPOLL_CTL_ADD, c->evfd, &ev)) {
        int e = errno;
        if (c->ch.fd >= 0)
            close(c->ch.fd);
        if (c->evfd >= 0)
            close(c->evfd);
        free(c);
        errno = e;
        return NULL;
    }
    pthread_mutex_lock(&rc_dispatch_lock);
    c->live_next = rc_live_channels;
    rc_live_channels = c;
    pthread_mutex_unlock(&rc_dispatch_lock);
    return &c->ch;
}

SN_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    struct rc_channel *c = rc_chan(channel);
    pthread_mutex_lock(&rc_dispatch_lock);
    for (struct rc_channel **pp = &rc_live_channels; *pp; pp = &(*pp)->live_next)
        if (*pp == c) {
            *pp = c->live_next;
            break;
        }
    if (c->waiters) {
        /* woken by the eventfd, the last waiter frees the channel (rc_abandon) */
        c->dead = 1;
        uint64_t one = 1;
        (void)!write(c->evfd, &one, sizeof(one));
        pthread_mutex_unlock(&rc_dispatch_lock);
        return;
    }
    pthread_mutex_unlock(&rc_dispatch_lock);
    rc_free_channel(c);
}

static void rc_watch(struct rc_id *r)
{
    if (r->sock < 0 || r->in_epoll || !r->chan)
        return;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = r->serial};
    if (!epoll_ctl(r->chan->ch.fd, EPOLL_CTL_ADD, r->sock, &ev))
        r->in_epoll = 1;
}

static void rc_unwatch(struct rc_id *r)
{
    if (r->in_epoll)
        epoll_ctl(r->chan->ch.fd, EPOLL_CTL_DEL, r->sock, NULL);
    r->in_epoll = 0;
}

static struct rc_event *rc_new_event(struct rc_id *r, enum rdma_cm_event_type type, int status,
                                     const struct rc_msg *m, uint32_t padded)
{
    struct rc_event *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->ev.id = &r->id;
    e->ev.event = type;
    e->ev.status = status;
    if (m) {
        memcpy(e->pdata, m->pdata, m->pdata_len < RC_PDATA_MAX ? m->pdata_len : RC_PDATA_MAX);
        e->ev.param.conn.private_data = e->pdata;
        e->ev.param.conn.private_data_len = (uint8_t)(padded ? padded : m->pdata_len);
        e->ev.param.conn.responder_resources = m->initiator_depth;
        e->ev.param.conn.initiator_depth = m->responder_resources;
        e->ev.param.conn.flow_control = m->flow_control;
        e->ev.param.conn.retry_count = m->retry_count;
        e->ev.param.conn.rnr_retry_count = m->rnr_retry_count;
        e->ev.param.conn.srq = m->srq;
        e->ev.param.conn.qp_num = m->qpn;
    }
    return e;
}

static uint32_t rc_padded(enum rdma_cm_event_type type)
{
    switch (type) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
        return PDATA_REQ;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
    case RDMA_CM_EVENT_ESTABLISHED:
        return PDATA_REP;
    case RDMA_CM_EVENT_REJECTED:
        return PDATA_REJ;
    default:
        return 0;
    }
}

void rc_queue_event(struct rc_id *r, enum rdma_cm_event_type type, int status,
                    const struct rc_msg *m)
{
    struct rc_event *e = rc_new_event(r, type, status, m, rc_padded(type));
    if (!e)
        return;
    struct rc_channel *c = r->chan;
    pthread_mutex_lock(&rc_lock);
    if (c->tail)
        c->tail->next = e;
    else
        c->head = e;
    c->tail = e;
    pthread_mutex_unlock(&rc_lock);
    uint64_t one = 1;
    (void)!write(c->evfd, &one, sizeof(one));
}

/* ---- ids ------------------------------------------------------------------------------- */

static struct rc_id *rc_alloc_id(struct rdma_event_channel *channel, void *context,
                                 enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
    struct rc_id *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    if (!channel) {
        channel = rdma_create_event_channel();
        if (!channel) {
            free(r);
            return NULL;
        }
        r->sync = 1;
    }
    r->chan = rc_chan(channel);
    r->id.channel = channel;
    r->id.context = context;
    r->id.ps = ps;
    r->id.qp_type = qp_type;
    r->sock = -1;
    uint32_t psn = 0;
    (void)!getrandom(&psn, sizeof(psn), 0);
    r->psn = psn & 0xffffff;
    rc_register_id(r);
    return r;
}

static int rc_ps_ok(enum rdma_port_space ps)
{
    return ps == RDMA_PS_TCP || ps == RDMA_PS_UDP || ps == RDMA_PS_IB || ps == RDMA_PS_IPOIB;
}

SN_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
                             void *context, enum rdma_port_space ps)
{
    if (!rc_ps_ok(ps))
        return rc_fail(EINVAL);
    struct rc_id *r = rc_alloc_id(channel, context, ps,
                                  ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD
                                                                           : IBV_QPT_RC);
    if (!r)
        return -1;
    *id = &r->id;
    return 0;
}

SN_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
    struct rc_id *r = rc_of(id);
    pthread_mutex_lock(&rc_dispatch_lock);
    while (r->events_out)
        pthread_cond_wait(&rc_acked, &rc_dispatch_lock);
    rc_forget_id(r);
    rc_unwatch(r);
    if (r->sock >= 0)
        close(r->sock);
    r->sock = -1;
    /* drop the id's events not yet delivered */
    struct rc_channel *c = r->chan;
    pthread_mutex_lock(&rc_lock);
    struct rc_event **pp = &c->head, *last = NULL;
    while (*pp) {
        if ((*pp)->ev.id == id) {
            struct rc_event *dead = *pp;
            *pp = dead->next;
            free(dead);
            uint64_t v;
            (void)!read(c->evfd, &v, sizeof(v));
        } else {
            last = *pp;
            pp = &(*pp)->next;
        }
    }
    c->tail = last;
    pthread_mutex_unlock(&rc_lock);
    pthread_mutex_unlock(&rc_dispatch_lock);
    if (r->req_event)
        free(r->req_event);
    free(r->ep_qp_attr);
    if (r->sync)
        rdma_destroy_event_channel(id->channel);
    free(r);
    return 0;
}

static void rc_fill_ibaddr(struct rc_id *r)
{
    struct ibv_port_attr pa;
    union ibv_gid gid;
    if (!r->id.verbs)
        return;
    r->id.port_num = 1;
    if (!ibv_query_gid(r->id.verbs, 1, 0, &gid))
        memcpy(&r->id.route.addr.addr.ibaddr.sgid, &gid, sizeof(gid));
    r->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
    if (!ibv_query_port(r->id.verbs, 1, &pa))
        r->path.slid = htobe16(pa.lid);
}

/* Reserves PORT (a free ephemeral one when 0) for a listener: the listening socket's name. */
static int rc_reserve_port(struct rc_id *r, uint16_t port)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    for (int tries = 0; tries < 256; tries++) {
        uint16_t p = port;
        if (!p) {
            uint16_t rnd = 0;
            (void)!getrandom(&rnd, sizeof(rnd), 0);
            p = (uint16_t)(32768 + rnd % 28232);
        }
        struct sockaddr_un un;
        socklen_t len;
        rc_listen_name(r->id.ps, p, &un, &len);
        if (!bind(fd, (struct sockaddr *)&un, len)) {
            r->sock = fd;
            rc_addr_set_port(&r->id.route.addr.src_addr, p);
            return 0;
        }
        if (errno != EADDRINUSE || port)
            break;
    }
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

SN_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
    struct rc_id *r = rc_of(id);
    socklen_t len = rc_addr_len(addr);
    if (!addr || addr->sa_family == AF_IB)
        return rc_fail(addr ? EAFNOSUPPORT : EINVAL);
    if (!len)
        return rc_fail(EAFNOSUPPORT);
    if (r->state != RC_IDLE)
        return rc_fail(EINVAL);
    if (!rc_addr_is_any(addr) && !rc_addr_is_local(addr))
        return rc_fail(EADDRNOTAVAIL);
    memcpy(&id->route.addr.src_storage, addr, len);
    if (rc_reserve_port(r, rc_addr_port(addr)))
        return -1;
    if (!rc_addr_is_any(addr)) {
        id->verbs = rc_device();
        if (!id->verbs) {
            close(r->sock);
            r->sock = -1;
            return rc_fail(ENODEV);
        }
        rc_fill_ibaddr(r);
    }
    r->state = RC_BOUND;
    return 0;
}

SN_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
                                struct sockaddr *dst_addr, int timeout_ms)
{
    (void)timeout_ms;
    struct rc_id *r = rc_of(id);
    if (!dst_addr || !rc_addr_len(dst_addr))
        return rc_fail(dst_addr && dst_addr->sa_family == AF_IB ? EAFNOSUPPORT : EINVAL);
    if (r->state == RC_IDLE && src_addr && rdma_bind_addr(id, src_addr))
        return -1;
    if (r->state != RC_IDLE && r->state != RC_BOUND)
        return rc_fail(EINVAL);
    memcpy(&id->route.addr.dst_storage, dst_addr, rc_addr_len(dst_addr));
    int local = rc_addr_is_local(dst_addr) || rc_addr_is_any(dst_addr);
    if (local) {
        if (!id->verbs)
            id->verbs = rc_device();
        if (!id->verbs)
            local = 0;
    }
    if (local) {
        if (id->route.addr.src_addr.sa_family == 0 || rc_addr_is_any(&id->route.addr.src_addr)) {
            uint16_t port = id->route.addr.src_addr.sa_family ? rc_addr_port(&id->route.addr.src_addr) : 0;
            memcpy(&id->route.addr.src_storage, dst_addr, rc_addr_len(dst_addr));
            if (!port) {
                uint16_t rnd = 0;
                (void)!getrandom(&rnd, sizeof(rnd), 0);
                port = (uint16_t)(32768 + rnd % 28232);
            }
            rc_addr_set_port(&id->route.addr.src_addr, port);
        }
        rc_fill_ibaddr(r);
        r->state = RC_ADDR_RESOLVED;
    }
    rc_queue_event(r, local ? RDMA_CM_EVENT_ADDR_RESOLVED : RDMA_CM_EVENT_ADDR_ERROR,
                   local ? 0 : -EHOSTUNREACH, NULL);
    return r->sync ? rc_sync_wait(r, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

SN_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
    (void)timeout_ms;
    struct rc_id *r = rc_of(id);
    if (r->state != RC_ADDR_RESOLVED)
        return rc_fail(EINVAL);
    r->state = RC_ROUTE_RESOLVED;
    id->route.path_rec = &r->path;
    id->route.num_paths = 1;
    r->path.sgid = id->route.addr.addr.ibaddr.sgid;
    r->path.dgid = id->route.addr.addr.ibaddr.sgid;
    r->path.dlid = r->path.slid;
    r->path.pkey = htobe16(0xffff);
    r->path.mtu = IBV_MTU_4096;
    r->path.reversible = 1;
    r->path.numb_path = 1;
    id->route.addr.addr.ibaddr.dgid = id->route.addr.addr.ibaddr.sgid;
    rc_queue_event(r, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL);
    return r->sync ? rc_sync_wait(r, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

SN_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
    struct rc_id *r = rc_of(id);
    if (r->state == RC_IDLE) {
        struct sockaddr_in any = {.sin_family = AF_INET};
        if (rdma_bind_addr(id, (struct sockaddr *)&any))
            return -1;
    }
    if (r->state != RC_BOUND)
        return rc_fail(EINVAL);
    if (listen(r->sock, backlog > 0 ? backlog : 128))
        return -1;
    r->state = RC_LISTEN;
    if (!r->sync)
        rc_watch(r);
    return 0;
}

static void rc_fill_local(struct rc_id *r, struct rc_msg *m, const struct rdma_conn_param *p)
{
    struct ibv_port_attr pa;
    union ibv_gid gid;
    if (r->id.verbs && !ibv_query_port(r->id.verbs, 1, &pa))
        m->lid = pa.lid;
    if (r->id.verbs && !ibv_query_gid(r->id.verbs, 1, 0, &gid))
        memcpy(m->gid, &gid, 16);
    m->psn = r->psn;
    m->qpn = r->id.qp ? r->id.qp->qp_num : p ? p->qp_num : 0;
    if (p) {
        m->responder_resources = p->responder_resources;
        m->initiator_depth = p->initiator_depth;
        m->flow_control = p->flow_control;
        m->retry_count = p->retry_count;
        m->rnr_retry_count = p->rnr_retry_count;
        m->srq = r->id.srq || r->id.qp ? !!r->id.srq : p->srq;
        if (p->private_data && p->private_data_len) {
            m->pdata_len = p->private_data_len;
            memcpy(m->pdata, p->private_data, p->private_data_len);
        }
    }
}

static int rc_send(struct rc_id *r, struct rc_msg *m)
{
    if (r->sock < 0)
        return rc_fail(ENOTCONN);
    return send(r->sock, m, sizeof(*m), MSG_NOSIGNAL) == (ssize_t)sizeof(*m) ? 0 : -1;
}

SN_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
    struct rc_id *r = rc_of(id);
    if (r->state != RC_ROUTE_RESOLVED)
        return rc_fail(EINVAL);
    if (id->qp_type == IBV_QPT_UD)
        return rc_fail(EOPNOTSUPP);     /* SIDR is not emulated */
    if (conn_param && conn_param->private_data_len > PDATA_REQ)
        return rc_fail(EINVAL);
    struct rc_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RC_REQ;
    rc_fill_local(r, &m, conn_param);
    if (!conn_param) {
        m.responder_resources = m.initiator_depth = 1;
        m.retry_count = m.rnr_retry_count = 7;
    }
    memcpy(&m.src, &id->route.addr.src_storage, sizeof(m.src));
    memcpy(&m.dst, &id->route.addr.dst_storage, sizeof(m.dst));
    struct sockaddr_un un;
    socklen_t len;
    rc_listen_name(id->ps, rc_addr_port(&id->route.addr.dst_addr), &un, &len);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    r->state = RC_CONNECTING;
    /* A port with no listener is tried again for up to a second before the rejection: a
     * server that closes its listener and listens anew between two connections (perftest's
     * rdma_cm mode does) is found, as the CM's retransmitted REQ would find it. */
    int rc;
    for (int tries = 0; (rc = connect(fd, (struct sockaddr *)&un, len)) && tries < 100 &&
                        (errno == ECONNREFUSED || errno == ENOENT); tries++)
        usleep(10000);
    if (rc) {
        close(fd);
        /* nobody listens on that port: the IB CM's "invalid service ID" rejection */
        r->state = RC_ROUTE_RESOLVED;
        rc_queue_event(r, RDMA_CM_EVENT_REJECTED, REJ_INVALID_SERVICE_ID, NULL);
        return r->sync ? rc_sync_wait(r, RDMA_CM_EVENT_ESTABLISHED) : 0;
    }
    if (r->sock >= 0) {
        rc_unwatch(r);
        close(r->sock);                 /* a port reserved by rdma_bind_addr */
    }
    r->sock = fd;
    if (rc_send(r, &m)) {
        int e = errno;
        close(fd);
        r->sock = -1;
        r->state = RC_ROUTE_RESOLVED;
        return rc_fail(e);
    }
    rc_watch(r);
    return r->sync ? rc_sync_wait(r, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

static int rc_ack_request(struct rc_id *r)
{
    if (r->req_event) {
        free(r->req_event);
        r->req_event = NULL;
        r->id.event = NULL;
    }
    return 0;
}

SN_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
    struct rc_id *r = rc_of(id);
    if (r->state != RC_REQ_RCVD)
        return rc_fail(EINVAL);
    if (conn_param && conn_param->private_data_len > PDATA_REP)
        return rc_fail(EINVAL);
    if (rc_qp_to_rts(r))
        return -1;
    struct rc_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RC_REP;
    rc_fill_local(r, &m, conn_param);
    if (!conn_param) {
        m.responder_resources = r->peer.initiator_depth;
        m.initiator_depth = r->peer.responder_resources;
        m.rnr_retry_count = 7;
    }
    r->state = RC_ACCEPTED;
    rc_ack_request(r);
    if (rc_send(r, &m))
        return -1;
    return r->sync ? rc_sync_wait(r, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

static int rc_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len, int reason)
{
    struct rc_id *r = rc_of(id);
    if (r->state != RC_REQ_RCVD && r->state != RC_REP_RCVD)
        return rc_fail(EINVAL);
    if (len > PDATA_REJ)
        return rc_fail(EINVAL);
    struct rc_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RC_REJ;
    m.status = reason;
    if (pdata && len) {
        m.pdata_len = len;
        memcpy(m.pdata, pdata, len);
    }
    r->state = RC_DISCONNECTED;
    rc_ack_request(r);
    return rc_send(r, &m);
}

SN_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t len)
{
    return rc_reject(id, private_data, len, REJ_CONSUMER_DEFINED);
}

SN_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t len)
{
    return rc_reject(id, private_data, len, REJ_CONSUMER_DEFINED);
}

SN_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
    struct rc_id *r = rc_of(id);
    if (r->state != RC_REP_RCVD)
        return rc_fail(EINVAL);
    struct rc_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RC_RTU;
    r->state = RC_CONNECTED;
    return rc_send(r, &m);
}

SN_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
    struct rc_id *r = rc_of(id);
    switch (r->state) {
    case RC_CONNECTED:
    case RC_ACCEPTED:
    case RC_REP_RCVD: {
        rc_qp_to_err(r);
        struct rc_msg m;
        memset(&m, 0, sizeof(m));
        m.type = RC_DREQ;
        r->state = RC_DISCONNECTING;
        if (rc_send(r, &m)) {
            r->state = RC_DISCONNECTED;
            rc_queue_event(r, RDMA_CM_EVENT_DISCONNECTED, 0, NULL);
        }
        return 0;
    }
    case RC_DISCONNECTED:
    case RC_DISCONNECTING:
        rc_qp_to_err(r);
        return 0;
    default:
        return rc_fail(EINVAL);
    }
}

SN_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
    struct rc_id *r = rc_of(id);
    int sync = 0;
    if (!channel) {
        channel = rdma_create_event_channel();
        if (!channel)
            return -1;
        sync = 1;
    }
    int watched = r->in_epoll;
    rc_unwatch(r);
    struct rc_channel *old = r->chan, *c = rc_chan(channel);
    /* events of the id not yet read move with it */
    pthread_mutex_lock(&rc_lock);
    struct rc_event **pp = &old->head, *last = NULL, *moved = NULL, **mt = &moved;
    int n = 0;
    while (*pp) {
        if ((*pp)->ev.id == id) {
            struct rc_event *e = *pp;
            *pp = e->next;
            e->next = NULL;
            *mt = e;
            mt = &e->next;
            n++;
        } else {
            last = *pp;
            pp = &(*pp)->next;
        }
    }
    old->tail = last;
    for (struct rc_event *e = moved; e; e = e->next) {
        if (c->tail)
            c->tail->next = e;
        else
            c->head = e;
        c->tail = e;
    }
    pthread_mutex_unlock(&rc_lock);
    for (int i = 0; i < n; i++) {
        uint64_t v = 1;
        (void)!read(old->evfd, &v, sizeof(v));
        v = 1;
        (void)!write(c->evfd, &v, sizeof(v));
    }
    int was_sync = r->sync;
    r->chan = c;
    id->channel = channel;
    r->sync = sync;
    if (watched || (r->state == RC_LISTEN && !sync))
        rc_watch(r);
    if (was_sync)
        rdma_destroy_event_channel(&old->ch);
    return 0;
}

/* ---- turning messages into events ------------------------------------------------------ */

/* A new connection on a listener: its REQ makes a child id and a CONNECT_REQUEST. */
static struct rc_event *rc_on_listen(struct rc_id *l)
{
    int fd = accept4(l->sock, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct rc_msg m;
    if (poll(&p, 1, 2000) != 1 || recv(fd, &m, sizeof(m), MSG_DONTWAIT) != (ssize_t)sizeof(m) ||
        m.type != RC_REQ) {
        close(fd);
        return NULL;
    }
    struct rc_id *r = rc_alloc_id(l->id.channel, l->id.context, l->id.ps, l->id.qp_type);
    if (!r) {
        close(fd);
        return NULL;
    }
    r->sync = 0;
    r->sock = fd;
    r->peer = m;
    r->state = RC_REQ_RCVD;
    r->id.verbs = rc_device();
    memcpy(&r->id.route.addr.src_storage, &m.dst, sizeof(m.dst));
    memcpy(&r->id.route.addr.dst_storage, &m.src, sizeof(m.src));
    rc_fill_ibaddr(r);
    memcpy(&r->id.route.addr.addr.ibaddr.dgid, m.gid, 16);
    r->id.route.path_rec = &r->path;
    r->id.route.num_paths = 1;
    r->path.dlid = htobe16(m.lid);
    r->path.pkey = htobe16(0xffff);
    r->path.mtu = IBV_MTU_4096;
    if (l->sync) {
        /* rdma_get_request: the child id is synchronous too */
        r->sync = 1;
        r->chan = rc_chan(rdma_create_event_channel());
        if (!r->chan) {
            close(fd);
            rc_forget_id(r);
            free(r);
            return NULL;
        }
        r->id.channel = &r->chan->ch;
    }
    rc_watch(r);
    struct rc_event *e = rc_new_event(r, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m, PDATA_REQ);
    if (e)
        e->ev.listen_id = &l->id;
    return e;
}

static struct rc_event *rc_on_message(struct rc_id *r)
{
    struct rc_msg m;
    ssize_t n = recv(r->sock, &m, sizeof(m), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return NULL;
    if (n != (ssize_t)sizeof(m)) {
        /* the peer closed its id or is gone */
        rc_unwatch(r);
        enum rc_state s = r->state;
        r->state = RC_DISCONNECTED;
        if (s == RC_CONNECTED || s == RC_DISCONNECTING || s == RC_REP_RCVD)
            return rc_new_event(r, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
        if (s == RC_CONNECTING)
            return rc_new_event(r, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, 0);
        if (s == RC_ACCEPTED || s == RC_REQ_RCVD)
            return rc_new_event(r, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET, NULL, 0);
        return NULL;
    }
    switch (m.type) {
    case RC_REP:
        if (r->state != RC_CONNECTING)
            return NULL;
        r->peer = m;
        if (!r->id.qp) {
            r->state = RC_REP_RCVD;
            return rc_new_event(r, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &m, PDATA_REP);
        }
        if (rc_qp_to_rts(r)) {
            struct rc_msg rej = {.type = RC_REJ, .status = REJ_CONSUMER_DEFINED};
            rc_send(r, &rej);
            r->state = RC_DISCONNECTED;
            return rc_new_event(r, RDMA_CM_EVENT_CONNECT_ERROR, -errno, NULL, 0);
        }
        r->state = RC_CONNECTED;
        {
            struct rc_msg rtu = {.type = RC_RTU};
            rc_send(r, &rtu);
        }
        return rc_new_event(r, RDMA_CM_EVENT_ESTABLISHED, 0, &m, PDATA_REP);
    case RC_REJ:
        if (r->state != RC_CONNECTING && r->state != RC_ACCEPTED)
            return NULL;
        r->state = RC_DISCONNECTED;
        rc_unwatch(r);
        return rc_new_event(r, RDMA_CM_EVENT_REJECTED, m.status, &m, PDATA_REJ);
    case RC_RTU:
        if (r->state != RC_ACCEPTED)
            return NULL;
        r->state = RC_CONNECTED;
        return rc_new_event(r, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
    case RC_DREQ: {
        struct rc_msg drep = {.type = RC_DREP};
        rc_send(r, &drep);
        if (r->state != RC_CONNECTED && r->state != RC_DISCONNECTING && r->state != RC_ACCEPTED)
            return NULL;
        r->state = RC_DISCONNECTED;
        return rc_new_event(r, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
    }
    case RC_DREP:
        if (r->state != RC_DISCONNECTING)
            return NULL;
        r->state = RC_DISCONNECTED;
        return rc_new_event(r, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
    default:
        return NULL;
    }
}

static struct rc_event *rc_pop_local(struct rc_channel *c)
{
    uint64_t v;
    if (read(c->evfd, &v, sizeof(v)) != sizeof(v))
        return NULL;
    pthread_mutex_lock(&rc_lock);
    struct rc_event *e = c->head;
    if (e) {
        c->head = e->next;
        if (!c->head)
            c->tail = NULL;
        e->next = NULL;
    }
    pthread_mutex_unlock(&rc_lock);
    return e;
}

/* The kernel's channel never wakes a thread it has been destroyed under: neither does ours. */
static void rc_abandon(struct rc_channel *c)
{
    if (--c->waiters == 0)
        rc_free_channel(c);
    pthread_mutex_unlock(&rc_dispatch_lock);
    for (;;)
        pause();
}

/* The channel's next event.  COUNT: the event goes to the application, and the id it belongs to
 * (the listener, for a CONNECT_REQUEST) is not destroyed until it is acked. */
static int rc_next_event(struct rc_channel *c, int count, struct rc_event **out)
{
    pthread_mutex_lock(&rc_dispatch_lock);
    if (!rc_channel_live(c)) {
        pthread_mutex_unlock(&rc_dispatch_lock);
        return rc_fail(EBADF);
    }
    int fl = fcntl(c->ch.fd, F_GETFL);
    int block = !(fl >= 0 && (fl & O_NONBLOCK));
    c->waiters++;
    struct rc_event *e = NULL;
    int err = 0;
    for (;;) {
        if (c->dead) {
            if (block)
                rc_abandon(c);
            err = EBADF;
            break;
        }
        e = rc_pop_local(c);
        if (e)
            break;
        pthread_mutex_unlock(&rc_dispatch_lock);
        struct epoll_event ev;
        int n = epoll_wait(c->ch.fd, &ev, 1, block ? -1 : 0);
        err = n < 0 ? errno : 0;
        pthread_mutex_lock(&rc_dispatch_lock);
        if (c->dead)
            continue;
        if (n < 0 && err == EINTR)
            continue;
        if (n < 0)
            break;
        if (n == 0) {
            err = EAGAIN;
            break;
        }
        struct rc_id *r = ev.data.u64 ? rc_find_id(ev.data.u64) : NULL;
        if (!r)
            continue;   /* the eventfd, or an id destroyed since its socket woke us */
        e = r->state == RC_LISTEN ? rc_on_listen(r) : rc_on_message(r);
        if (e)
            break;
    }
    if (e && count) {
        e->counted = e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->ev.listen_id
                         ? rc_of(e->ev.listen_id) : rc_of(e->ev.id);
        e->counted->events_out++;
    }
    int last = --c->waiters == 0 && c->dead;
    pthread_mutex_unlock(&rc_dispatch_lock);
    if (last)
        rc_free_channel(c);
    if (!e)
        return rc_fail(err);
    *out = e;
    return 0;
}

SN_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
    if (!channel || !event)
        return rc_fail(EINVAL);
    struct rc_event *e;
    if (rc_next_event(rc_chan(channel), 1, &e))
        return -1;
    *event = &e->ev;
    return 0;
}

SN_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    if (!event)
        return rc_fail(EINVAL);
    struct rc_event *e = (struct rc_event *)event;  /* the event is its rc_event's first member */
    if (e->counted) {
        pthread_mutex_lock(&rc_dispatch_lock);
        e->counted->events_out--;
        pthread_cond_broadcast(&rc_acked);
        pthread_mutex_unlock(&rc_dispatch_lock);
    }
    free(e);
    return 0;
}

/* A synchronous id's call waits for its outcome: WANT, or an error event. */
int rc_sync_wait(struct rc_id *r, enum rdma_cm_event_type want)
{
    struct rc_event *e;
    if (rc_next_event(r->chan, 0, &e))
        return -1;
    int ok = e->ev.event == want;
    int status = e->ev.status;
    enum rdma_cm_event_type got = e->ev.event;
    free(e);
    if (ok)
        return 0;
    if (got == RDMA_CM_EVENT_REJECTED)
        return rc_fail(ECONNREFUSED);
    return rc_fail(status < 0 ? -status : status ? status : EINVAL);
}

SN_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
    struct rc_id *l = rc_of(listen);
    if (!l->sync || l->state != RC_LISTEN)
        return rc_fail(EINVAL);
    struct pollfd p = {.fd = l->sock, .events = POLLIN};
    for (;;) {
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            return -1;
        struct rc_event *e = rc_on_listen(l);
        if (!e)
            continue;
        struct rc_id *r = rc_of(e->ev.id);
        r->req_event = e;
        r->id.event = &e->ev;
        if (l->ep_qp_attr) {
            struct ibv_qp_init_attr attr = *l->ep_qp_attr;
            if (l->ep_pd)
                r->id.pd = l->ep_pd;
            if (rdma_create_qp(&r->id, l->ep_pd, &attr)) {
                int err = errno;
                rdma_reject(&r->id, NULL, 0);
                rdma_destroy_id(&r->id);
                errno = err;
                return -1;
            }
        }
        *id = &r->id;
        return 0;
    }
}

static const char *const rc_event_names[] = {
    "RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
    "RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST",
    "RDMA_CM_EVENT_CONNECT_RESPONSE", "RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
    "RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED",
    "RDMA_CM_EVENT_DEVICE_REMOVAL", "RDMA_CM_EVENT_MULTICAST_JOIN",
    "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT",
};

SN_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
    if ((unsigned)event < sizeof(rc_event_names) / sizeof(rc_event_names[0]))
        return rc_event_names[event];
    return "UNKNOWN EVENT";
}
