/* DevX event channels: a descriptor that polls and blocks as the kernel's does (one event per
 * read), subscriptions to a DevX QP's events (the engine delivers them), mlx5dv_devx_get_event.
 *
 * The channel is a SOCK_SEQPACKET pair: each event is one message, so a read returns exactly
 * one event as the kernel's device file does, and a blocking read waits for the next one.
 * An event is {cookie} on a channel made with OMIT_EV_DATA, else {cookie, 64-byte EQE}. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sn_devx.h"
#include "sn_export.h"

#define EQE_BYTES 64

struct sn_devx_evch {
    struct mlx5dv_devx_event_channel dv;    /* first: fd is what applications poll */
    int wfd;                                /* the engine's end */
    int omit_data;
    pthread_mutex_t lock;                   /* subs */
    struct sn_devx_sub *subs;
};

SN_EXPORT struct mlx5dv_devx_event_channel *
mlx5dv_devx_create_event_channel(struct ibv_context *c, enum mlx5_ib_uapi_devx_create_event_channel_flags flags)
{
    struct sn_devx_evch *ch;
    int sv[2];

    if (!c || (flags & ~MLX5_IB_UAPI_DEVX_CR_EV_CH_FLAGS_OMIT_DATA)) {
        errno = EINVAL;
        return NULL;
    }
    ch = calloc(1, sizeof(*ch));
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
        free(ch);
        return NULL;
    }
    shutdown(sv[0], SHUT_WR);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);     /* the engine never waits for a reader */
    ch->dv.fd = sv[0];
    ch->wfd = sv[1];
    ch->omit_data = !!(flags & MLX5_IB_UAPI_DEVX_CR_EV_CH_FLAGS_OMIT_DATA);
    pthread_mutex_init(&ch->lock, NULL);
    return &ch->dv;
}

SN_EXPORT void mlx5dv_devx_destroy_event_channel(struct mlx5dv_devx_event_channel *dv)
{
    struct sn_devx_evch *ch = (struct sn_devx_evch *)dv;

    if (!ch)
        return;
    pthread_mutex_lock(&ch->lock);
    while (ch->subs) {
        struct sn_devx_sub *s = ch->subs;

        ch->subs = s->ch_next;
        pthread_mutex_lock(&s->eng->lock);
        if (s->qp)
            for (struct sn_devx_sub **pp = &s->qp->devx_subs; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                    *pp = s->next;
                    break;
                }
        pthread_mutex_unlock(&s->eng->lock);
        free(s);
    }
    pthread_mutex_unlock(&ch->lock);
    close(ch->dv.fd);
    close(ch->wfd);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
}

void sn_devx_unsubscribe_qp(struct sn_eqp *qp)
{
    for (struct sn_devx_sub *s = qp->devx_subs; s; s = s->next)
        s->qp = NULL;   /* the channel frees it */
    qp->devx_subs = NULL;
}

/* The QP events the kernel lets a DevX QP subscribe to (PRM event types). */
static int qp_event(uint16_t ev)
{
    switch (ev) {
    case 0x01:  /* PATH_MIG */
    case 0x02:  /* COMM_EST */
    case 0x03:  /* SQ_DRAINED */
    case 0x07:  /* PATH_MIG_FAILED */
    case 0x10:  /* WQ_CATAS_ERROR */
    case 0x11:  /* WQ_INVAL_REQ_ERROR */
    case 0x12:  /* WQ_ACCESS_ERROR */
    case 0x13:  /* SRQ_LAST_WQE */
        return 1;
    default:
        return 0;
    }
}

static int subscribe(struct sn_devx_evch *ch, struct mlx5dv_devx_obj *obj, uint16_t nevents,
                     const uint16_t *events, uint64_t cookie, int efd)
{
    struct sn_engine *eng;

    if (!obj) {
        /* unaffiliated events (port state, ...): the emulated port never changes */
        for (uint16_t i = 0; i < nevents; i++)
            if (qp_event(events[i]))
                return EINVAL;
        return 0;
    }
    if (obj->kind != OBJ_QP)
        return EOPNOTSUPP;      /* CQ completion and error events on DevX CQs: not emulated */
    for (uint16_t i = 0; i < nevents; i++)
        if (!qp_event(events[i]))
            return EINVAL;
    eng = obj->ctx->eng;
    pthread_mutex_lock(&ch->lock);
    for (uint16_t i = 0; i < nevents; i++) {
        struct sn_devx_sub *s = calloc(1, sizeof(*s));

        if (!s) {
            pthread_mutex_unlock(&ch->lock);
            return ENOMEM;
        }
        s->event = events[i];
        s->omit_data = (uint8_t)ch->omit_data;
        s->to_eventfd = efd >= 0;
        s->fd = efd >= 0 ? efd : ch->wfd;
        s->cookie = cookie;
        s->qpn = obj->id;
        s->qp = obj->qp;
        s->eng = eng;
        s->ch_next = ch->subs;
        ch->subs = s;
        pthread_mutex_lock(&eng->lock);
        s->next = obj->qp->devx_subs;
        obj->qp->devx_subs = s;
        pthread_mutex_unlock(&eng->lock);
    }
    pthread_mutex_unlock(&ch->lock);
    return 0;
}

SN_EXPORT int mlx5dv_devx_subscribe_devx_event(struct mlx5dv_devx_event_channel *dv,
                                               struct mlx5dv_devx_obj *obj, uint16_t events_sz,
                                               uint16_t events_num[], uint64_t cookie)
{
    int ret;

    if (!dv || !events_num || events_sz < sizeof(uint16_t))
        return errno = EINVAL;
    ret = subscribe((struct sn_devx_evch *)dv, obj, events_sz / sizeof(uint16_t), events_num,
                    cookie, -1);
    if (ret)
        errno = ret;
    return ret;
}

SN_EXPORT int mlx5dv_devx_subscribe_devx_event_fd(struct mlx5dv_devx_event_channel *dv, int fd,
                                                  struct mlx5dv_devx_obj *obj, uint16_t event_num)
{
    int ret;

    if (!dv || fd < 0)
        return errno = EINVAL;
    ret = subscribe((struct sn_devx_evch *)dv, obj, 1, &event_num, 0, fd);
    if (ret)
        errno = ret;
    return ret;
}

/* One event (blocking unless the descriptor is O_NONBLOCK); ENOSPC when the buffer cannot
 * hold it, as the kernel answers. */
SN_EXPORT ssize_t mlx5dv_devx_get_event(struct mlx5dv_devx_event_channel *dv,
                                        struct mlx5dv_devx_async_event_hdr *event_data,
                                        size_t event_resp_len)
{
    struct sn_devx_evch *ch = (struct sn_devx_evch *)dv;
    size_t need = sizeof(uint64_t) + (ch->omit_data ? 0 : EQE_BYTES);

    if (event_resp_len < need) {
        errno = ENOSPC;
        return -1;
    }
    return read(ch->dv.fd, event_data, event_resp_len);
}
