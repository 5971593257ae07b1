/* A last message sent just before rdma_disconnect must still arrive, and complete on the
 * receiver even when the receiver moves its QP to ERR as soon as it sees the disconnection.
 *
 * On a fabric the message is on the wire before the disconnect request, and the receiving
 * NIC has placed it long before the receiving program can react to the CM event.  On the
 * emulated NIC the NIC's work runs on threads of the two processes; the receiver here keeps
 * its own NIC thread from running (pinned to the receiver's CPU with SCHED_IDLE while the
 * receiver spins on its event channel) so that the message is still waiting in its inbox when
 * the disconnect request is read: the worst case of a loaded machine, every round.
 *
 *   cm_last_message server <port> <rounds>    prints "round N: <status> <bytes> <data ok|bad>"
 *   cm_last_message client <port> <rounds>    sends one message a round, then disconnects */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define MSG_LEN 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "cm_last_message: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* The next event of type WANT on CH (blocking, up to 10 s); exits on anything else. */
static struct rdma_cm_event *wait_event(struct rdma_event_channel *ch,
                                        enum rdma_cm_event_type want)
{
    struct pollfd p = {.fd = ch->fd, .events = POLLIN};
    struct rdma_cm_event *ev;
    if (poll(&p, 1, 10000) != 1 || rdma_get_cm_event(ch, &ev))
        die("no CM event");
    if (ev->event != want) {
        fprintf(stderr, "cm_last_message: got %s, wanted %s\n", rdma_event_str(ev->event),
                rdma_event_str(want));
        exit(1);
    }
    return ev;
}

struct conn {
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t buf[MSG_LEN];
};

static void setup_qp(struct rdma_cm_id *id, struct conn *c)
{
    c->pd = ibv_alloc_pd(id->verbs);
    c->cq = c->pd ? ibv_create_cq(id->verbs, 16, NULL, NULL, 0) : NULL;
    c->mr = c->cq ? ibv_reg_mr(c->pd, c->buf, sizeof(c->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
    struct ibv_qp_init_attr qa = {.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    if (!c->mr || rdma_create_qp(id, c->pd, &qa))
        die("QP");
}

static void teardown(struct rdma_cm_id *id, struct conn *c)
{
    rdma_destroy_qp(id);
    ibv_dereg_mr(c->mr);
    ibv_destroy_cq(c->cq);
    ibv_dealloc_pd(c->pd);
    rdma_destroy_id(id);
}

static void fill(uint8_t *b, int round)
{
    for (int i = 0; i < MSG_LEN; i++)
        b[i] = (uint8_t)(round * 31 + i);
}

/* The emulated NIC's thread of this process ("simnic-<device>"), or 0. */
static pid_t nic_thread(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    pid_t tid = 0;
    while (d && !tid && (e = readdir(d))) {
        char path[64], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(comm, sizeof(comm), f) && !strncmp(comm, "simnic-", 7))
                tid = atoi(e->d_name);
            fclose(f);
        }
    }
    if (d)
        closedir(d);
    return tid;
}

/* Starves (on) or releases (off) the NIC thread: same CPU as this thread, SCHED_IDLE. */
static void starve_nic(pid_t tid, int on)
{
    static cpu_set_t all;
    struct sched_param sp = {0};
    cpu_set_t one;
    if (!tid)
        return;
    if (on) {
        sched_getaffinity(0, sizeof(all), &all);
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu(), &one);
        sched_setaffinity(0, sizeof(one), &one);
        sched_setaffinity(tid, sizeof(one), &one);
        sched_setscheduler(tid, SCHED_IDLE, &sp);
    } else {
        sched_setscheduler(tid, SCHED_OTHER, &sp);
        sched_setaffinity(tid, sizeof(all), &all);
        sched_setaffinity(0, sizeof(all), &all);
    }
}

static int server(struct sockaddr_in *addr, int rounds)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *listener;
    if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(listener, (struct sockaddr *)addr) || rdma_listen(listener, 4))
        die("listen");
    int bad = 0;
    for (int round = 0; round < rounds; round++) {
        struct rdma_cm_event *ev = wait_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
        struct rdma_cm_id *id = ev->id;
        rdma_ack_cm_event(ev);
        struct conn c;
        memset(c.buf, 0, sizeof(c.buf));
        setup_qp(id, &c);
        struct ibv_sge sge = {.addr = (uintptr_t)c.buf, .length = MSG_LEN, .lkey = c.mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *badwr;
        struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1,
                                     .retry_count = 7, .rnr_retry_count = 7};
        if (ibv_post_recv(id->qp, &wr, &badwr) || rdma_accept(id, &cp))
            die("accept");
        rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ESTABLISHED));

        /* spin on the channel with the NIC thread starved, as a loaded machine may */
        pid_t tid = nic_thread();
        int fl = fcntl(ch->fd, F_GETFL);
        fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
        starve_nic(tid, 1);
        double deadline = now_s() + 10;
        while (rdma_get_cm_event(ch, &ev)) {
            if (errno != EAGAIN || now_s() > deadline) {
                starve_nic(tid, 0);
                die("no disconnection");
            }
        }
        enum rdma_cm_event_type got = ev->event;
        rdma_ack_cm_event(ev);
        /* what a program does on DISCONNECTED: the QP goes to ERR */
        rdma_disconnect(id);
        starve_nic(tid, 0);
        fcntl(ch->fd, F_SETFL, fl);
        if (got != RDMA_CM_EVENT_DISCONNECTED) {
            fprintf(stderr, "cm_last_message: got %s\n", rdma_event_str(got));
            return 1;
        }

        struct ibv_wc wc;
        int n = 0;
        for (deadline = now_s() + 5; !n && now_s() < deadline;)
            n = ibv_poll_cq(c.cq, 1, &wc);
        uint8_t want[MSG_LEN];
        fill(want, round);
        int ok = n == 1 && wc.status == IBV_WC_SUCCESS;
        printf("round %d: %s %u %s\n", round, n ? ibv_wc_status_str(wc.status) : "nothing",
               ok ? wc.byte_len : 0, ok && !memcmp(c.buf, want, MSG_LEN) ? "data ok" : "data bad");
        bad += !ok;
        teardown(id, &c);
    }
    rdma_destroy_id(listener);
    rdma_destroy_event_channel(ch);
    return bad ? 1 : 0;
}

static int client(struct sockaddr_in *addr, int rounds)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch)
        die("channel");
    for (int round = 0; round < rounds; round++) {
        struct rdma_cm_id *id;
        if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
            rdma_resolve_addr(id, NULL, (struct sockaddr *)addr, 2000))
            die("resolve");
        rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
        if (rdma_resolve_route(id, 2000))
            die("route");
        rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
        struct conn c;
        setup_qp(id, &c);
        struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1,
                                     .retry_count = 7, .rnr_retry_count = 7};
        if (rdma_connect(id, &cp))
            die("connect");
        rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ESTABLISHED));
        usleep(20000);          /* the server is spinning with its NIC thread starved */

        /* the last message, and at once the disconnection */
        fill(c.buf, round);
        struct ibv_sge sge = {.addr = (uintptr_t)c.buf, .length = MSG_LEN, .lkey = c.mr->lkey};
        struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1,
                                 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *badwr;
        if (ibv_post_send(id->qp, &wr, &badwr) || rdma_disconnect(id))
            die("send and disconnect");
        rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_DISCONNECTED));
        struct ibv_wc wc;
        for (double deadline = now_s() + 5; !ibv_poll_cq(c.cq, 1, &wc) && now_s() < deadline;)
            ;   /* flushed or acknowledged: the QP is in ERR either way */
        teardown(id, &c);
    }
    rdma_destroy_event_channel(ch);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: cm_last_message server|client <port> <rounds>\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rounds = atoi(argv[3]);
    return !strcmp(argv[1], "server") ? server(&addr, rounds) : client(&addr, rounds);
}
