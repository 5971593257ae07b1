/* Addresses, devices and rdma_getaddrinfo of the emulated librdmacm.
 *
 * How IP addresses map to emulated devices: every address assigned to an interface of this
 * host (127.0.0.0/8 and ::1 included) is an address of mlx5_0, port 1, of whichever process
 * uses it; the wildcard address binds to no device, as in the kernel.  Other addresses are not
 * on the emulated fabric.  All processes on a fabric share one host, so an (address, port)
 * pair names a listener by its port alone. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rdmacm_int.h"
#include "sn_export.h"

pthread_mutex_t rc_lock = PTHREAD_MUTEX_INITIALIZER;

static struct ibv_context **rc_ctxs;
static struct ibv_pd **rc_pds;
static int rc_nctx = -1;

socklen_t rc_addr_len(const struct sockaddr *sa)
{
    if (!sa)
        return 0;
    return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
         : sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : 0;
}

uint16_t rc_addr_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)sa)->sin_port);
    if (sa->sa_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    return 0;
}

void rc_addr_set_port(struct sockaddr *sa, uint16_t port)
{
    if (sa->sa_family == AF_INET)
        ((struct sockaddr_in *)sa)->sin_port = htons(port);
    else if (sa->sa_family == AF_INET6)
        ((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

int rc_addr_is_any(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (sa->sa_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr, &in6addr_any,
                       sizeof(in6addr_any));
    return 0;
}

/* An address is local when a datagram socket can bind to it. */
int rc_addr_is_local(const struct sockaddr *sa)
{
    socklen_t len = rc_addr_len(sa);
    if (!len)
        return 0;
    struct sockaddr_storage tmp;
    memcpy(&tmp, sa, len);
    rc_addr_set_port((struct sockaddr *)&tmp, 0);
    int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int ok = bind(fd, (struct sockaddr *)&tmp, len) == 0;
    close(fd);
    return ok;
}

static void rc_open_devices(void)
{
    if (rc_nctx >= 0)
        return;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    rc_nctx = 0;
    if (!list)
        return;
    rc_ctxs = calloc((size_t)n + 1, sizeof(*rc_ctxs));
    rc_pds = calloc((size_t)n + 1, sizeof(*rc_pds));
    for (int i = 0; rc_ctxs && rc_pds && i < n; i++) {
        struct ibv_context *c = ibv_open_device(list[i]);
        if (c)
            rc_ctxs[rc_nctx++] = c;
    }
    ibv_free_device_list(list);
}

struct ibv_context *rc_device(void)
{
    pthread_mutex_lock(&rc_lock);
    rc_open_devices();
    struct ibv_context *c = rc_nctx > 0 ? rc_ctxs[0] : NULL;
    pthread_mutex_unlock(&rc_lock);
    return c;
}

struct ibv_pd *rc_default_pd(struct ibv_context *ctx)
{
    struct ibv_pd *pd = NULL;
    pthread_mutex_lock(&rc_lock);
    for (int i = 0; i < rc_nctx; i++) {
        if (rc_ctxs[i] != ctx)
            continue;
        if (!rc_pds[i])
            rc_pds[i] = ibv_alloc_pd(ctx);
        pd = rc_pds[i];
    }
    pthread_mutex_unlock(&rc_lock);
    return pd;
}

int rc_listen_name(int ps, uint16_t port, struct sockaddr_un *un, socklen_t *len)
{
    const char *fabric = getenv("SIMNIC_FABRIC");
    memset(un, 0, sizeof(*un));
    un->sun_family = AF_UNIX;
    int n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "simnic.%u.%s.cm.%d.%u",
                     (unsigned)getuid(), fabric && *fabric ? fabric : "default", ps, port);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    return 0;
}

SN_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
    pthread_mutex_lock(&rc_lock);
    rc_open_devices();
    struct ibv_context **out = calloc((size_t)rc_nctx + 1, sizeof(*out));
    if (out)
        memcpy(out, rc_ctxs, (size_t)rc_nctx * sizeof(*out));
    if (num_devices)
        *num_devices = out ? rc_nctx : 0;
    pthread_mutex_unlock(&rc_lock);
    if (!out)
        errno = ENOMEM;
    return out;
}

SN_EXPORT void rdma_free_devices(struct ibv_context **list)
{
    free(list);
}

static struct sockaddr *rc_dup_addr(const struct sockaddr *sa, socklen_t *len)
{
    *len = rc_addr_len(sa);
    struct sockaddr *copy = *len ? malloc(*len) : NULL;
    if (copy)
        memcpy(copy, sa, *len);
    return copy;
}

SN_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
    while (res) {
        struct rdma_addrinfo *next = res->ai_next;
        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_route);
        free(res->ai_connect);
        free(res);
        res = next;
    }
}

/* As rdma-core's: the name is resolved with getaddrinfo (whose EAI_* code is returned on
 * failure); a passive request fills the source address, an active one the destination (and
 * the source when the hints carry one). */
SN_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
                               const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
    if (!res) {
        errno = EINVAL;
        return -1;
    }
    struct rdma_addrinfo *rai = calloc(1, sizeof(*rai));
    if (!rai) {
        errno = ENOMEM;
        return -1;
    }
    if (hints) {
        rai->ai_flags = hints->ai_flags;
        rai->ai_family = hints->ai_family;
        rai->ai_qp_type = hints->ai_qp_type;
        rai->ai_port_space = hints->ai_port_space;
    }
    if (hints && hints->ai_family == AF_IB) {
        rdma_freeaddrinfo(rai);
        return EAI_FAMILY;
    }
    if (!rai->ai_port_space)
        rai->ai_port_space = rai->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
    if (!rai->ai_qp_type)
        rai->ai_qp_type = rai->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
    int passive = hints && (hints->ai_flags & RAI_PASSIVE);
    if (node || service) {
        struct addrinfo h = {0}, *ai = NULL;
        h.ai_family = rai->ai_family;
        h.ai_socktype = SOCK_STREAM;
        h.ai_flags = (passive ? AI_PASSIVE : 0) |
                     (hints && (hints->ai_flags & RAI_NUMERICHOST) ? AI_NUMERICHOST : 0);
        int ret = getaddrinfo(node, service, &h, &ai);
        if (ret) {
            rdma_freeaddrinfo(rai);
            return ret;
        }
        rai->ai_family = ai->ai_family;
        if (passive) {
            rai->ai_src_addr = rc_dup_addr(ai->ai_addr, &rai->ai_src_len);
            if (node)
                rai->ai_src_canonname = ai->ai_canonname ? strdup(ai->ai_canonname) : NULL;
        } else {
            rai->ai_dst_addr = rc_dup_addr(ai->ai_addr, &rai->ai_dst_len);
            if (ai->ai_canonname)
                rai->ai_dst_canonname = strdup(ai->ai_canonname);
        }
        freeaddrinfo(ai);
    }
    if (hints && hints->ai_src_addr && !rai->ai_src_addr) {
        rai->ai_src_addr = rc_dup_addr(hints->ai_src_addr, &rai->ai_src_len);
        if (!rai->ai_family)
            rai->ai_family = hints->ai_src_addr->sa_family;
    }
    if (hints && hints->ai_dst_addr && !rai->ai_dst_addr)
        rai->ai_dst_addr = rc_dup_addr(hints->ai_dst_addr, &rai->ai_dst_len);
    if (!rai->ai_src_addr && !rai->ai_dst_addr && !passive) {
        rdma_freeaddrinfo(rai);
        return EAI_NONAME;
    }
    *res = rai;
    return 0;
}
