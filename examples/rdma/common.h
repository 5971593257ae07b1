/* Helpers shared by the RDMA example programs: opening the first device, exchanging
 * connection data over loopback TCP (as ibv_rc_pingpong does), connecting an RC QP.
 * Header-only so that each example stays one file plus this one. */
#ifndef EXAMPLES_RDMA_COMMON_H
#define EXAMPLES_RDMA_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define DIE(...)                                                      \
	do {                                                          \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);       \
		fprintf(stderr, __VA_ARGS__);                         \
		fprintf(stderr, "\n");                                \
		exit(2);                                              \
	} while (0)

#define CHECK(cond, ...)               \
	do {                           \
		if (!(cond))           \
			DIE(__VA_ARGS__); \
	} while (0)

/* What one side tells the other. */
struct peer_info {
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	uint16_t pad;
	uint32_t rkey;
	uint64_t addr;
	uint64_t len;
	uint8_t gid[16];
};

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Server: listens on PORT, accepts one client.  Client: connects to host:PORT (retrying for
 * up to 10 s while the server starts).  Returns the connected socket. */
static inline int tcp_connect_or_accept(const char *host, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd, one = 1;

	if (!host) {
		int lfd = socket(AF_INET, SOCK_STREAM, 0);

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		CHECK(!bind(lfd, (struct sockaddr *)&a, sizeof(a)), "bind port %d: %s", port, strerror(errno));
		CHECK(!listen(lfd, 1), "listen: %s", strerror(errno));
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "accept: %s", strerror(errno));
		close(lfd);
	} else {
		CHECK(inet_pton(AF_INET, strcmp(host, "localhost") ? host : "127.0.0.1", &a.sin_addr) == 1,
		      "bad address %s", host);
		for (int i = 0;; i++) {
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (!connect(fd, (struct sockaddr *)&a, sizeof(a)))
				break;
			close(fd);
			CHECK(i < 200, "cannot connect to %s:%d", host, port);
			usleep(50000);
		}
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static inline void xfer(int fd, void *buf, size_t len, int send_it)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = send_it ? write(fd, p, len) : read(fd, p, len);

		CHECK(n > 0, "socket %s: %s", send_it ? "write" : "read", n ? strerror(errno) : "closed");
		p += n;
		len -= (size_t)n;
	}
}

/* Exchanges MINE for THEIRS (both sides send first: the socket buffers hold it). */
static inline void exchange(int fd, const struct peer_info *mine, struct peer_info *theirs)
{
	xfer(fd, (void *)mine, sizeof(*mine), 1);
	xfer(fd, theirs, sizeof(*theirs), 0);
}

/* A one-byte barrier over the socket. */
static inline void sync_peer(int fd)
{
	char c = 's';

	xfer(fd, &c, 1, 1);
	xfer(fd, &c, 1, 0);
}

static inline struct ibv_context *open_first_device(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;

	CHECK(list && list[0], "no RDMA device");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	return ctx;
}

static inline void fill_local_info(struct ibv_context *ctx, struct ibv_qp *qp, struct peer_info *me)
{
	struct ibv_port_attr pa;
	union ibv_gid gid;

	CHECK(!ibv_query_port(ctx, 1, &pa), "ibv_query_port");
	CHECK(!ibv_query_gid(ctx, 1, 0, &gid), "ibv_query_gid");
	me->qpn = qp->qp_num;
	me->lid = pa.lid;
	me->psn = (uint32_t)lrand48() & 0xffffff;
	memcpy(me->gid, gid.raw, 16);
}

/* RESET -> INIT -> RTR -> RTS for an RC QP connected to PEER. */
static inline void connect_rc(struct ibv_qp *qp, const struct peer_info *me,
			      const struct peer_info *peer, unsigned access)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = access;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = me->psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 16;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
	      "to RTS");
}

/* Polls CQ until N completions arrived (or TIMEOUT_S passed: exit 3). */
static inline void poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, double timeout_s)
{
	double end = now_s() + timeout_s;
	int got = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		CHECK(r >= 0, "ibv_poll_cq: %d", r);
		got += r;
		if (!r && now_s() > end) {
			fprintf(stderr, "timeout: %d of %d completions\n", got, n);
			exit(3);
		}
	}
}

#endif
