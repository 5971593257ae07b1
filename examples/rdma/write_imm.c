/* RC RDMA WRITE with immediate and SEND with immediate between two processes: the receiver
 * checks what its completions say.
 *
 *   write_imm [-p PORT]         server: a 2 MiB region, receives posted for the immediates
 *   write_imm [-p PORT] HOST    client: WRITE_WITH_IMM of 0 B to 1 MiB + 13, each followed by
 *                               a 16-byte SEND_WITH_IMM
 *
 * For every WRITE_WITH_IMM the server's completion must be IBV_WC_RECV_RDMA_WITH_IMM with
 * IBV_WC_WITH_IMM, the immediate the client chose, byte_len equal to the write's length,
 * src_qp the client's QP, the receive's wr_id in order, its buffer untouched (the data goes
 * where the client wrote it, and is there when the completion is seen); for every
 * SEND_WITH_IMM IBV_WC_RECV with the immediate, byte_len 16 and the bytes in the buffer.
 * Last, the server arms its CQ for solicited completions only: a SEND_WITH_IMM without
 * IBV_SEND_SOLICITED raises no completion event, the next one with it does.
 * Exit status 0 only when everything matched.
 */
#include <poll.h>

#include "common.h"

#define REGION (2u << 20)
#define RBUF 64
static const uint32_t sizes[] = {0, 1, 64, 4096, 65536, 1048589};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define NRECV (2 * NSIZES + 2)     /* a write and a send per size, two solicited-phase sends */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_comp_channel *ch;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static uint8_t *region, *rbufs;
static struct ibv_mr *rmr, *bmr;

static uint8_t pattern(uint32_t i, uint32_t off)
{
	return (uint8_t)(off * 7 + i * 41 + 3);
}

static uint32_t write_imm(uint32_t i)
{
	return 0xA0000000u | sizes[i];
}

static uint32_t send_imm(uint32_t i)
{
	return 0x5E000000u | i;
}

static void setup(void)
{
	struct ibv_qp_init_attr ia = {
		.cap = {.max_send_wr = 64, .max_recv_wr = NRECV, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};

	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	ch = ibv_create_comp_channel(ctx);
	cq = ch ? ibv_create_cq(ctx, 256, NULL, ch, 0) : NULL;
	region = calloc(1, REGION);
	rbufs = malloc(NRECV * RBUF);
	CHECK(pd && cq && region && rbufs, "setup: %s", strerror(errno));
	memset(rbufs, 0xee, NRECV * RBUF);
	rmr = ibv_reg_mr(pd, region, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	bmr = ibv_reg_mr(pd, rbufs, NRECV * RBUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(rmr && bmr, "ibv_reg_mr: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = cq;
	qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));
}

/* 1 when the completion channel has an event within MS milliseconds */
static int event_within(int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1;
}

static void solicited_phase(int fd)
{
	struct ibv_cq *ev_cq;
	struct ibv_wc wc[2];
	void *ev_ctx;

	CHECK(!ibv_req_notify_cq(cq, 1), "ibv_req_notify_cq(solicited)");
	sync_peer(fd);          /* the client sends without IBV_SEND_SOLICITED */
	sync_peer(fd);          /* ... and saw it complete */
	CHECK(!event_within(50), "an event for an unsolicited send");
	sync_peer(fd);          /* now a solicited one */
	CHECK(event_within(10000), "no event for the solicited send");
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == cq, "ibv_get_cq_event");
	ibv_ack_cq_events(cq, 1);
	poll_n(cq, wc, 2, 30);
	for (int i = 0; i < 2; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == 2 * NSIZES + (uint64_t)i &&
		      ntohl(wc[i].imm_data) == 0x50u + (uint32_t)i, "solicited phase receive %d", i);
}

static void solicited_phase_client(int fd)
{
	struct ibv_sge sg = {(uintptr_t)region, 8, rmr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM}, *bad;
	struct ibv_wc wc;

	for (int i = 0; i < 2; i++) {
		sync_peer(fd);
		wr.wr_id = 100 + (uint64_t)i;
		wr.imm_data = htonl(0x50u + (uint32_t)i);
		wr.send_flags = IBV_SEND_SIGNALED | (i ? IBV_SEND_SOLICITED : 0);
		CHECK(!ibv_post_send(qp, &wr, &bad), "post SEND_WITH_IMM");
		poll_n(cq, &wc, 1, 30);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr.wr_id, "solicited phase send %d", i);
		if (!i)
			sync_peer(fd);
	}
}

static int server(int fd)
{
	struct peer_info me = {0}, peer;
	struct ibv_wc wc;
	uint32_t i;

	fill_local_info(ctx, qp, &me);
	me.addr = (uintptr_t)region;
	me.rkey = rmr->rkey;
	me.len = REGION;
	exchange(fd, &me, &peer);
	connect_rc(qp, &me, &peer, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	for (i = 0; i < NRECV; i++) {
		struct ibv_sge sg = {(uintptr_t)(rbufs + i * RBUF), RBUF, bmr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sg, .num_sge = 1}, *bad;

		CHECK(!ibv_post_recv(qp, &wr, &bad), "ibv_post_recv");
	}
	sync_peer(fd);
	for (i = 0; i < 2 * NSIZES; i++) {
		uint32_t k = i / 2;
		const uint8_t *rb = rbufs + i * RBUF;

		poll_n(cq, &wc, 1, 30);
		CHECK(wc.status == IBV_WC_SUCCESS, "receive %u: %s", i, ibv_wc_status_str(wc.status));
		CHECK(wc.wr_id == i, "receive %u completed as wr_id %llu", i, (unsigned long long)wc.wr_id);
		CHECK(wc.qp_num == qp->qp_num && wc.src_qp == peer.qpn, "receive %u: qp %#x src_qp %#x", i,
		      wc.qp_num, wc.src_qp);
		CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "receive %u: wc_flags %#x", i, wc.wc_flags);
		if (i % 2 == 0) {
			CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, "receive %u: opcode %d", i, wc.opcode);
			CHECK(ntohl(wc.imm_data) == write_imm(k), "write %u: immediate %#x", k, ntohl(wc.imm_data));
			CHECK(wc.byte_len == sizes[k], "write %u: byte_len %u, expected %u", k, wc.byte_len,
			      sizes[k]);
			for (uint32_t b = 0; b < RBUF; b++)
				CHECK(rb[b] == 0xee, "write %u: the receive buffer was written", k);
			for (uint32_t b = 0; b < sizes[k]; b++)
				CHECK(region[b] == pattern(k, b), "write %u: byte %u is %#x", k, b, region[b]);
		} else {
			CHECK(wc.opcode == IBV_WC_RECV, "receive %u: opcode %d", i, wc.opcode);
			CHECK(ntohl(wc.imm_data) == send_imm(k), "send %u: immediate %#x", k, ntohl(wc.imm_data));
			CHECK(wc.byte_len == 16, "send %u: byte_len %u", k, wc.byte_len);
			for (uint32_t b = 0; b < 16; b++)
				CHECK(rb[b] == pattern(k + 100, b), "send %u: byte %u", k, b);
			CHECK(rb[16] == 0xee, "send %u: written past byte_len", k);
			sync_peer(fd);  /* checked: the client may overwrite the region */
		}
	}
	solicited_phase(fd);
	sync_peer(fd);
	printf("server: %zu writes with immediate (0 to %u bytes) and %zu sends with immediate: "
	       "opcode, immediate, byte_len, src_qp and data verified; solicited event only for "
	       "the solicited send\n", NSIZES, sizes[NSIZES - 1], NSIZES);
	return 0;
}

static int client(int fd)
{
	struct peer_info me = {0}, peer;
	struct ibv_wc wc;

	fill_local_info(ctx, qp, &me);
	exchange(fd, &me, &peer);
	connect_rc(qp, &me, &peer, IBV_ACCESS_LOCAL_WRITE);
	sync_peer(fd);
	for (uint32_t k = 0; k < NSIZES; k++) {
		struct ibv_sge sg = {(uintptr_t)region, sizes[k], rmr->lkey};
		struct ibv_send_wr wr = {.wr_id = 2 * k, .sg_list = &sg, .num_sge = sizes[k] ? 1 : 0,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;

		for (uint32_t b = 0; b < sizes[k]; b++)
			region[b] = pattern(k, b);
		wr.imm_data = htonl(write_imm(k));
		wr.wr.rdma.remote_addr = peer.addr;
		wr.wr.rdma.rkey = peer.rkey;
		CHECK(!ibv_post_send(qp, &wr, &bad), "post WRITE_WITH_IMM");
		poll_n(cq, &wc, 1, 30);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 2 * k,
		      "write %u: %s opcode %d", k, ibv_wc_status_str(wc.status), wc.opcode);
		for (uint32_t b = 0; b < 16; b++)
			region[REGION - 16 + b] = pattern(k + 100, b);
		sg.addr = (uintptr_t)(region + REGION - 16);
		sg.length = 16;
		wr.num_sge = 1;
		wr.wr_id = 2 * k + 1;
		wr.opcode = IBV_WR_SEND_WITH_IMM;
		wr.imm_data = htonl(send_imm(k));
		CHECK(!ibv_post_send(qp, &wr, &bad), "post SEND_WITH_IMM");
		poll_n(cq, &wc, 1, 30);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 2 * k + 1,
		      "send %u: %s opcode %d", k, ibv_wc_status_str(wc.status), wc.opcode);
		sync_peer(fd);
	}
	solicited_phase_client(fd);
	sync_peer(fd);
	printf("client: %zu writes with immediate, %zu sends with immediate completed\n", NSIZES, NSIZES);
	return 0;
}

int main(int argc, char **argv)
{
	int port = 18610, opt, fd;
	const char *host = NULL;

	while ((opt = getopt(argc, argv, "p:")) != -1)
		port = atoi(optarg);
	if (optind < argc)
		host = argv[optind];
	setup();
	fd = tcp_connect_or_accept(host, port);
	return host ? client(fd) : server(fd);
}
