/* The rest of librdmacm's interface: endpoints (rdma_create_ep), ports, options, ECE, and what
 * the emulated fabric does not have -- multicast and rsockets -- answered with the errors
 * rdma-core gives where the kernel lacks them. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "rdmacm_int.h"
#include "sn_export.h"

SN_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
                             struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
    if (!id || !res) {
        errno = EINVAL;
        return -1;
    }
    struct rdma_cm_id *cm;
    if (rdma_create_id(NULL, &cm, NULL, (enum rdma_port_space)res->ai_port_space))
        return -1;
    rc_of(cm)->id.qp_type = (enum ibv_qp_type)res->ai_qp_type;
    int ret;
    if (res->ai_flags & RAI_PASSIVE) {
        ret = rdma_bind_addr(cm, res->ai_src_addr);
    } else {
        ret = rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000);
        if (!ret)
            ret = rdma_resolve_route(cm, 2000);
    }
    if (!ret && pd)
        cm->pd = pd;
    if (!ret && qp_init_attr) {
        qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
        if (res->ai_flags & RAI_PASSIVE) {
            /* each request rdma_get_request returns gets a QP made like this */
            struct rc_id *r = rc_of(cm);
            r->ep_qp_attr = malloc(sizeof(*qp_init_attr));
            if (r->ep_qp_attr) {
                *r->ep_qp_attr = *qp_init_attr;
                r->ep_pd = pd;
            } else {
                errno = ENOMEM;
                ret = -1;
            }
        } else {
            ret = rdma_create_qp(cm, pd, qp_init_attr);
        }
    }
    if (ret) {
        int e = errno;
        rdma_destroy_id(cm);
        errno = e;
        return -1;
    }
    *id = cm;
    return 0;
}

SN_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
    if (id->qp)
        rdma_destroy_qp(id);
    if (id->srq)
        rdma_destroy_srq(id);
    rdma_destroy_id(id);
}

SN_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
    return htons(rc_addr_port(&id->route.addr.src_addr));
}

SN_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
    return htons(rc_addr_port(&id->route.addr.dst_addr));
}

SN_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
                              size_t optlen)
{
    (void)id;
    if (!optval) {
        errno = EINVAL;
        return -1;
    }
    if (level == RDMA_OPTION_ID && (optname == RDMA_OPTION_ID_TOS ||
                                    optname == RDMA_OPTION_ID_REUSEADDR ||
                                    optname == RDMA_OPTION_ID_AFONLY ||
                                    optname == RDMA_OPTION_ID_ACK_TIMEOUT))
        return 0;
    if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH && optlen)
        return 0;
    errno = ENOSYS;
    return -1;
}

SN_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
    (void)id;
    (void)event;
    return 0;
}

SN_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
    if (!id || !ece) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

SN_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
    if (!id || !ece) {
        errno = EINVAL;
        return -1;
    }
    memset(ece, 0, sizeof(*ece));
    return 0;
}

/* Multicast needs the subnet administrator, which the emulated fabric does not have. */
SN_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
    (void)id; (void)addr; (void)context;
    errno = EOPNOTSUPP;
    return -1;
}

SN_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr,
                                     void *context)
{
    (void)id; (void)attr; (void)context;
    errno = EOPNOTSUPP;
    return -1;
}

SN_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
    (void)id; (void)addr;
    errno = EADDRNOTAVAIL;
    return -1;
}

/* rsockets are not emulated: rsocket() fails as rdma-core's does on a host without an RDMA
 * device (ENODEV), and every call on a socket it never made fails with EBADF. */
#define NO_RSOCKET(ret, name, ...)                \
    SN_EXPORT ret name(__VA_ARGS__)               \
    {                                             \
        errno = EBADF;                            \
        return (ret)-1;                           \
    }

SN_EXPORT int rsocket(int domain, int type, int protocol)
{
    (void)domain; (void)type; (void)protocol;
    errno = ENODEV;
    return -1;
}

NO_RSOCKET(int, rbind, int s, const struct sockaddr *a, socklen_t l)
NO_RSOCKET(int, rlisten, int s, int backlog)
NO_RSOCKET(int, raccept, int s, struct sockaddr *a, socklen_t *l)
NO_RSOCKET(int, rconnect, int s, const struct sockaddr *a, socklen_t l)
NO_RSOCKET(int, rshutdown, int s, int how)
NO_RSOCKET(int, rclose, int s)
NO_RSOCKET(ssize_t, rrecv, int s, void *b, size_t l, int f)
NO_RSOCKET(ssize_t, rrecvfrom, int s, void *b, size_t l, int f, struct sockaddr *a, socklen_t *al)
NO_RSOCKET(ssize_t, rrecvmsg, int s, struct msghdr *m, int f)
NO_RSOCKET(ssize_t, rsend, int s, const void *b, size_t l, int f)
NO_RSOCKET(ssize_t, rsendto, int s, const void *b, size_t l, int f, const struct sockaddr *a,
           socklen_t al)
NO_RSOCKET(ssize_t, rsendmsg, int s, const struct msghdr *m, int f)
NO_RSOCKET(ssize_t, rread, int s, void *b, size_t l)
NO_RSOCKET(ssize_t, rreadv, int s, const struct iovec *v, int c)
NO_RSOCKET(ssize_t, rwrite, int s, const void *b, size_t l)
NO_RSOCKET(ssize_t, rwritev, int s, const struct iovec *v, int c)
NO_RSOCKET(int, rgetpeername, int s, struct sockaddr *a, socklen_t *l)
NO_RSOCKET(int, rgetsockname, int s, struct sockaddr *a, socklen_t *l)
NO_RSOCKET(int, rsetsockopt, int s, int lv, int n, const void *v, socklen_t l)
NO_RSOCKET(int, rgetsockopt, int s, int lv, int n, void *v, socklen_t *l)
NO_RSOCKET(off_t, riomap, int s, void *b, size_t l, int p, int f, off_t o)
NO_RSOCKET(int, riounmap, int s, void *b, size_t l)
NO_RSOCKET(size_t, riowrite, int s, const void *b, size_t c, off_t o, int f)

SN_EXPORT int rfcntl(int s, int cmd, ...)
{
    (void)s; (void)cmd;
    errno = EBADF;
    return -1;
}

/* With no rsocket among them, rpoll and rselect are poll and select. */
SN_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    return poll(fds, nfds, timeout);
}

SN_EXPORT int rselect(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
    return select(nfds, r, w, e, t);
}
