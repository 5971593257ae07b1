/* rdma_cm's edges in one process: two event channels, a listener and an active id, and ids
 * without QPs (the program's own QP numbers), so only connection management is exercised.
 * Prints one line per check, "ok <what>" or "FAIL <what>: <detail>", and exits 1 on a failure.
 *   cm_edges <port> */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static int failures;

static void check(int ok, const char *what, const char *detail)
{
    printf(ok ? "ok %s\n" : "FAIL %s: %s\n", what, detail);
    failures += !ok;
}

/* The next event on CH, waiting up to 5 s; NULL on timeout. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
    struct pollfd p = {.fd = ch->fd, .events = POLLIN};
    struct rdma_cm_event *ev;
    for (int i = 0; i < 50; i++) {
        if (poll(&p, 1, 100) == 1 && !rdma_get_cm_event(ch, &ev))
            return ev;
    }
    return NULL;
}

static int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type, const char *what,
                  struct rdma_cm_event **out)
{
    struct rdma_cm_event *ev = next_event(ch);
    char detail[128];
    snprintf(detail, sizeof(detail), "got %s", ev ? rdma_event_str(ev->event) : "nothing");
    int ok = ev && ev->event == type;
    check(ok, what, detail);
    if (ok && out) {
        *out = ev;
        return 0;
    }
    if (ev)
        rdma_ack_cm_event(ev);
    return ok ? 0 : -1;
}

static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, struct sockaddr_in *dst)
{
    struct rdma_cm_id *id;
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
        rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, 1000) ||
        expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "address resolved", NULL) ||
        rdma_resolve_route(id, 1000) ||
        expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolved", NULL)) {
        check(0, "resolve", strerror(errno));
        return NULL;
    }
    return id;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cm_edges <port>\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct rdma_event_channel *sch = rdma_create_event_channel();
    struct rdma_event_channel *cch = rdma_create_event_channel();
    struct rdma_cm_id *listener, *cli, *child;
    struct rdma_cm_event *ev;
    uint8_t pdata[200];
    for (int i = 0; i < (int)sizeof(pdata); i++)
        pdata[i] = (uint8_t)(i * 7 + 1);

    /* a non-blocking channel with nothing queued: EAGAIN */
    fcntl(sch->fd, F_SETFL, fcntl(sch->fd, F_GETFL) | O_NONBLOCK);
    errno = 0;
    check(rdma_get_cm_event(sch, &ev) == -1 && errno == EAGAIN, "empty non-blocking channel",
          strerror(errno));

    if (rdma_create_id(sch, &listener, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(listener, (struct sockaddr *)&addr) || rdma_listen(listener, 4)) {
        perror("listen");
        return 1;
    }
    check(listener->verbs && ntohs(rdma_get_src_port(listener)) == ntohs(addr.sin_port),
          "bound to the device and port", "no device or wrong port");

    /* 1: private data over the REQ limit is refused; the request is rejected with data */
    if (!(cli = resolved(cch, &addr)))
        return 1;
    struct rdma_conn_param cp = {.private_data = pdata, .private_data_len = 57,
                                 .responder_resources = 1, .initiator_depth = 1,
                                 .qp_num = 0x1234, .retry_count = 7, .rnr_retry_count = 7};
    errno = 0;
    check(rdma_connect(cli, &cp) == -1 && errno == EINVAL, "57 bytes of REQ private data refused",
          strerror(errno));
    cp.private_data_len = 56;
    check(!rdma_connect(cli, &cp), "connect", strerror(errno));
    if (!expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, "connect request", &ev)) {
        check(ev->listen_id == listener && ev->param.conn.private_data_len == 56 &&
              !memcmp(ev->param.conn.private_data, pdata, 56) && ev->param.conn.qp_num == 0x1234,
              "request carries listener, 56 bytes and the QP number", "mismatch");
        child = ev->id;
        rdma_ack_cm_event(ev);
        check(!rdma_reject(child, pdata + 100, 20), "reject with 20 bytes", strerror(errno));
        rdma_destroy_id(child);
    }
    if (!expect(cch, RDMA_CM_EVENT_REJECTED, "rejected", &ev)) {
        check(ev->status == 28 && ev->param.conn.private_data_len == 148 &&
              !memcmp(ev->param.conn.private_data, pdata + 100, 20),
              "rejection: consumer reason 28, the 20 bytes, padded to 148", "mismatch");
        rdma_ack_cm_event(ev);
    }
    rdma_destroy_id(cli);

    /* 2: accepted with private data, no QP on the ids: CONNECT_RESPONSE then rdma_establish */
    if (!(cli = resolved(cch, &addr)))
        return 1;
    check(!rdma_connect(cli, &cp), "connect again", strerror(errno));
    if (expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, "second request", &ev))
        return 1;
    child = ev->id;
    rdma_ack_cm_event(ev);
    struct rdma_conn_param ap = {.private_data = pdata + 1, .private_data_len = 196,
                                 .responder_resources = 1, .initiator_depth = 1, .qp_num = 0x5678};
    check(!rdma_accept(child, &ap), "accept with 196 bytes", strerror(errno));
    if (!expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE, "connect response", &ev)) {
        check(ev->param.conn.qp_num == 0x5678 && ev->param.conn.private_data_len == 196 &&
              !memcmp(ev->param.conn.private_data, pdata + 1, 196),
              "response carries the QP number and 196 bytes", "mismatch");
        rdma_ack_cm_event(ev);
    }
    check(!rdma_establish(cli), "establish", strerror(errno));
    expect(sch, RDMA_CM_EVENT_ESTABLISHED, "passive side established", NULL);

    /* the client id moves to the listener's channel; its disconnect is reported there */
    check(!rdma_migrate_id(cli, sch) && cli->channel == sch, "migrate", strerror(errno));
    check(!rdma_disconnect(cli), "disconnect", strerror(errno));
    int seen_cli = 0, seen_child = 0;
    for (int i = 0; i < 2; i++) {
        if ((ev = next_event(sch))) {
            if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
                seen_cli += ev->id == cli, seen_child += ev->id == child;
            rdma_ack_cm_event(ev);
        }
    }
    check(seen_cli == 1 && seen_child == 1, "one DISCONNECTED for each side", "missing");
    check(!rdma_disconnect(child), "disconnect the disconnected", strerror(errno));

    rdma_destroy_id(child);
    rdma_destroy_id(cli);
    rdma_destroy_id(listener);
    rdma_destroy_event_channel(cch);
    rdma_destroy_event_channel(sch);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
