/* UD datagrams between two processes: through ibv_post_send, through ibv_wr_*, and through
 * mlx5 WQEs written directly into the send queue (as UCX's ud_mlx5 does), each delivery
 * verified by the receiver.
 *
 *   ud_ops [-p PORT]            server: posts receives, checks every completion and buffer
 *   ud_ops [-p PORT] HOST       client: sends the datagrams below, then the error cases
 *   ud_ops -l                   loopback: two UD QPs of one process on one port, a receive
 *                               CQ armed for solicited completions only
 *
 * Every receive buffer gets the 40-byte GRH area first and the data after it; the server
 * checks byte_len (40 + length), src_qp, slid, IBV_WC_GRH and the GRH itself when the sender
 * asked for a global route, the immediate, and every byte.  Datagrams the wire drops (wrong
 * Q_Key, larger than the MTU) complete at the sender and never reach a receive.  Then a
 * receive too small for its datagram completes with IBV_WC_LOC_LEN_ERR and moves the QP to
 * the error state, and an RDMA WRITE on a UD QP completes with IBV_WC_LOC_QP_OP_ERR.
 * Exit status 0 only when everything matched.
 */
#include <poll.h>
#include <stdatomic.h>

#include <infiniband/mlx5dv.h>

#include "common.h"

#define QKEY 0x11111111u
#define GRH 40
#define BUF (GRH + 4096)
#define NRECV 9
#define TINY 16                 /* the last receive: too small for what comes */

/* What the client sends, in order; the server expects the ones not dropped. */
enum path { VERBS, VERBS_GRH, VERBS_INLINE, WR_API, DIRECT_COMPACT, DIRECT_GRH, DIRECT_MIXED };
static const struct datagram {
	enum path path;
	uint32_t len;
	uint32_t imm;           /* 0: a plain SEND */
	uint32_t qkey;
	int dropped;
} plan[] = {
	{VERBS, 1, 0, QKEY, 0},
	{VERBS, 4096, 0x1234, QKEY, 0},
	{VERBS_GRH, 100, 0, QKEY, 0},
	{VERBS, 64, 0, QKEY + 1, 1},        /* another Q_Key: dropped */
	{VERBS, 4097, 0, QKEY, 1},          /* larger than the MTU: dropped */
	{VERBS_INLINE, 32, 0, QKEY, 0},
	{WR_API, 300, 0x77, QKEY, 0},
	{DIRECT_COMPACT, 2000, 0xabcd, QKEY, 0},
	{DIRECT_GRH, 512, 0, QKEY, 0},
	{DIRECT_MIXED, 700, 0, QKEY, 0},    /* a 12-byte header inline, then a data segment */
};
#define NPLAN (sizeof(plan) / sizeof(plan[0]))

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint8_t *buf;
static struct ibv_mr *mr;

static uint8_t pattern(uint32_t i, uint32_t off)
{
	return (uint8_t)(i * 37 + off * 13 + 5);
}

static struct ibv_qp *ud_qp(int send_ops)
{
	struct ibv_qp_init_attr_ex ia = {
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1,
			.max_inline_data = 32},
		.qp_type = IBV_QPT_UD,
		.send_cq = cq,
		.recv_cq = cq,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	struct ibv_qp *qp;

	if (send_ops) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	}
	qp = ibv_create_qp_ex(ctx, &ia);
	CHECK(qp, "ibv_create_qp_ex(UD): %s", strerror(errno));
	CHECK(ia.cap.max_inline_data >= 32, "max_inline_data %u", ia.cap.max_inline_data);
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) == EINVAL,
	      "INIT without a Q_Key accepted");
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
	      "UD to INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV) == EINVAL, "UD RTR with an AV accepted");
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE), "UD to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD to RTS");
	return qp;
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK(!ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY, &ia), "ibv_query_qp");
	CHECK(a.qkey == QKEY, "qkey %#x", a.qkey);
	return a.qp_state;
}

static void setup(void)
{
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	buf = calloc(NRECV + 1, BUF);   /* the receives, and one buffer more */
	CHECK(pd && cq && buf, "pd/cq: %s", strerror(errno));
	mr = ibv_reg_mr(pd, buf, (size_t)(NRECV + 1) * BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
}

/* The client sends from three QPs: verbs posting (qpn), ibv_wr_* (rkey field), direct WQEs
 * (addr field). */
static uint32_t src_qpn(const struct peer_info *client, enum path path)
{
	if (path == WR_API)
		return client->rkey;
	if (path == DIRECT_COMPACT || path == DIRECT_GRH || path == DIRECT_MIXED)
		return (uint32_t)client->addr;
	return client->qpn;
}

/* The server answers the GRH datagram through ibv_create_ah_from_wc, from a second QP, to
 * the client's ibv_wr_* QP. */
#define REPLY 77

static void reply(struct ibv_wc *wc, struct ibv_grh *grh, const struct peer_info *client)
{
	struct ibv_qp *qp2 = ud_qp(0);
	struct ibv_ah *ah = ibv_create_ah_from_wc(pd, wc, grh, 1);
	uint8_t *src = buf + NRECV * BUF;
	struct ibv_sge sg = {(uintptr_t)src, REPLY, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_wc w;

	CHECK(ah, "ibv_create_ah_from_wc: %s", strerror(errno));
	for (uint32_t k = 0; k < REPLY; k++)
		src[k] = pattern(REPLY, k);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = client->rkey;
	wr.wr.ud.remote_qkey = QKEY;
	CHECK(!ibv_post_send(qp2, &wr, &bad), "ibv_post_send(reply)");
	poll_n(cq, &w, 1, 30);
	CHECK(w.status == IBV_WC_SUCCESS && w.qp_num == qp2->qp_num, "reply: %s",
	      ibv_wc_status_str(w.status));
	CHECK(!ibv_destroy_ah(ah) && !ibv_destroy_qp(qp2), "destroy");
}

/* ---- server ------------------------------------------------------------------------------ */

static int server(int fd)
{
	struct ibv_qp *qp = ud_qp(0);
	struct peer_info me = {0}, peer;
	union ibv_gid mygid;
	struct ibv_wc wc[NRECV + 1];
	uint32_t i, n = 0, delivered = 0;

	fill_local_info(ctx, qp, &me);
	memcpy(mygid.raw, me.gid, 16);
	for (i = 0; i < NRECV; i++) {
		struct ibv_sge sg = {(uintptr_t)(buf + i * BUF), i + 1 < NRECV ? BUF : TINY, mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sg, .num_sge = 1}, *bad;

		memset(buf + i * BUF, 0xee, BUF);
		CHECK(!ibv_post_recv(qp, &wr, &bad), "ibv_post_recv");
	}
	exchange(fd, &me, &peer);
	/* the datagrams not dropped, then the one for the tiny receive */
	for (i = 0; i < NPLAN; i++)
		n += !plan[i].dropped;
	CHECK(n + 1 == NRECV, "plan and receives disagree");
	poll_n(cq, wc, NRECV, 30);
	for (i = 0; i < NPLAN; i++) {
		const struct datagram *d = &plan[i];
		const struct ibv_wc *w = &wc[delivered];
		const uint8_t *p = buf + delivered * BUF;
		int grh = d->path == VERBS_GRH || d->path == DIRECT_GRH;

		if (d->dropped)
			continue;
		CHECK(w->status == IBV_WC_SUCCESS, "datagram %u: %s", i, ibv_wc_status_str(w->status));
		CHECK(w->wr_id == delivered, "datagram %u in receive %llu", i, (unsigned long long)w->wr_id);
		CHECK(w->opcode == IBV_WC_RECV, "datagram %u: opcode %d", i, w->opcode);
		CHECK(w->byte_len == GRH + d->len, "datagram %u: byte_len %u, expected %u", i, w->byte_len,
		      GRH + d->len);
		CHECK(w->src_qp == src_qpn(&peer, d->path) && w->slid == peer.lid,
		      "datagram %u: from %#x LID %u", i, w->src_qp, w->slid);
		CHECK(!!(w->wc_flags & IBV_WC_GRH) == grh, "datagram %u: wc_flags %#x", i, w->wc_flags);
		CHECK(!!(w->wc_flags & IBV_WC_WITH_IMM) == !!d->imm, "datagram %u: wc_flags %#x", i, w->wc_flags);
		if (d->imm)
			CHECK(ntohl(w->imm_data) == d->imm, "datagram %u: immediate %#x", i, ntohl(w->imm_data));
		if (grh) {
			const struct ibv_grh *g = (const void *)p;

			CHECK(g->next_hdr == 0x1b && (ntohl(g->version_tclass_flow) >> 28) == 6,
			      "datagram %u: GRH next header %#x", i, g->next_hdr);
			CHECK(!memcmp(g->sgid.raw, peer.gid, 16) && !memcmp(g->dgid.raw, mygid.raw, 16),
			      "datagram %u: GRH GIDs", i);
		} else {
			for (int k = 0; k < GRH; k++)
				CHECK(p[k] == 0xee, "datagram %u: GRH area written without a GRH", i);
		}
		for (uint32_t k = 0; k < d->len; k++)
			CHECK(p[GRH + k] == pattern(i, k), "datagram %u: byte %u is %#x", i, k, p[GRH + k]);
		CHECK(p[GRH + d->len] == 0xee || d->len == 4096, "datagram %u: written past its end", i);
		delivered++;
	}
	CHECK(wc[delivered].status == IBV_WC_LOC_LEN_ERR && wc[delivered].wr_id == NRECV - 1,
	      "tiny receive: %s", ibv_wc_status_str(wc[delivered].status));
	usleep(20000);
	CHECK(ibv_poll_cq(cq, 1, wc) == 0, "a completion more: wr_id %llu %s",
	      (unsigned long long)wc[0].wr_id, ibv_wc_status_str(wc[0].status));
	CHECK(qp_state(qp) == IBV_QPS_ERR, "QP not in error after the length error");
	sync_peer(fd);  /* the client has seen all its send completions */
	reply(&wc[2], (struct ibv_grh *)(buf + 2 * BUF), &peer);
	sync_peer(fd);
	printf("server: %u datagrams verified (GRH, immediates, data), 2 dropped, "
	       "tiny receive LOC_LEN_ERR, QP in ERR, replied\n", delivered);
	return 0;
}

/* ---- client ------------------------------------------------------------------------------ */

static void wait_send(struct ibv_qp *qp, enum ibv_wc_status want, const char *what)
{
	struct ibv_wc wc;

	poll_n(cq, &wc, 1, 30);
	CHECK(wc.status == want && wc.qp_num == qp->qp_num, "%s: %s", what, ibv_wc_status_str(wc.status));
	CHECK(want != IBV_WC_SUCCESS || wc.opcode == IBV_WC_SEND, "%s: opcode %d", what, wc.opcode);
}

/* One datagram as a UCX-style program posts it: control segment, the address vector (16
 * bytes, or the AH's 48-byte one), a data segment (MIXED: a 12-byte header inline first, as
 * UCX's zero-copy sends do); then doorbell record and BlueFlame. */
static void post_direct(struct ibv_qp *qp, struct mlx5dv_qp *dv, const struct mlx5_wqe_av *av,
			int compact, int mixed, uint32_t dqpn, const struct datagram *d, uint8_t *src)
{
	static uint32_t pi, bf_off;
	uint8_t *wqe = (uint8_t *)dv->sq.buf + (size_t)(pi & (dv->sq.wqe_cnt - 1)) * 64;
	struct mlx5_wqe_ctrl_seg *ctrl = (void *)wqe;
	struct mlx5_wqe_av *seg = (void *)(wqe + 16);
	uint32_t avsz = compact ? 16 : 48, hdr = mixed ? 12 : 0;
	uint32_t ds = (16 + avsz + (mixed ? 16 : 0) + 16) / 16;
	struct mlx5_wqe_data_seg *data;
	uint8_t *p = wqe + 16 + avsz;
	uint64_t v;

	memset(wqe, 0, 128);
	memcpy(seg, av, avsz);
	seg->key.qkey.qkey = htonl(d->qkey);
	seg->dqp_dct = htonl(dqpn | (compact ? 0 : MLX5_EXTENDED_UD_AV));
	if (compact) {
		CHECK(!(ntohl(av->dqp_dct) & MLX5_EXTENDED_UD_AV), "a LID AV that is not compact");
	}
	if (mixed) {
		uint32_t bc = htonl(hdr | MLX5_INLINE_SEG);

		memcpy(p, &bc, 4);
		memcpy(p + 4, src, hdr);
		p += 16;
	}
	data = (void *)p;
	data->byte_count = htonl(d->len - hdr);
	data->lkey = htonl(mr->lkey);
	data->addr = htobe64((uintptr_t)(src + hdr));
	ctrl->opmod_idx_opcode = htonl((pi & 0xffff) << 8 | (d->imm ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND));
	ctrl->qpn_ds = htonl(qp->qp_num << 8 | ds);
	ctrl->fm_ce_se = MLX5_WQE_CTRL_CQ_UPDATE;
	ctrl->imm = htonl(d->imm);
	pi += (ds * 16 + 63) / 64;
	atomic_thread_fence(memory_order_release);
	dv->dbrec[MLX5_SND_DBR] = htonl(pi & 0xffff);
	atomic_thread_fence(memory_order_release);
	memcpy(&v, ctrl, 8);
	*(volatile uint64_t *)((uint8_t *)dv->bf.reg + bf_off) = v;
	bf_off ^= dv->bf.size;
}

static int client(int fd)
{
	struct ibv_qp *qp = ud_qp(0), *wrqp = ud_qp(1), *dqp = ud_qp(0);
	struct peer_info me = {0}, peer;
	struct ibv_ah_attr lid_attr = {.port_num = 1}, grh_attr = {.port_num = 1, .is_global = 1};
	struct ibv_ah *lid_ah, *grh_ah;
	struct mlx5dv_qp dvqp = {0};
	struct mlx5dv_ah dvlid = {0}, dvgrh = {0};
	struct mlx5dv_obj obj = {0};
	uint8_t *src = buf, *rbuf = buf + NRECV * BUF;
	struct ibv_sge rsg = {(uintptr_t)rbuf, BUF, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1000, .sg_list = &rsg, .num_sge = 1}, *rbad;
	struct ibv_wc rwc;

	/* the server's answer comes to the ibv_wr_* QP */
	CHECK(!ibv_post_recv(wrqp, &rwr, &rbad), "ibv_post_recv");

	fill_local_info(ctx, qp, &me);
	me.rkey = wrqp->qp_num;
	me.addr = dqp->qp_num;
	exchange(fd, &me, &peer);
	lid_attr.dlid = peer.lid;
	grh_attr.dlid = peer.lid;
	grh_attr.grh.hop_limit = 64;
	memcpy(grh_attr.grh.dgid.raw, peer.gid, 16);
	lid_ah = ibv_create_ah(pd, &lid_attr);
	grh_ah = ibv_create_ah(pd, &grh_attr);
	CHECK(lid_ah && grh_ah, "ibv_create_ah: %s", strerror(errno));
	obj.qp.in = dqp;
	obj.qp.out = &dvqp;
	obj.ah.in = lid_ah;
	obj.ah.out = &dvlid;
	CHECK(!mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_AH), "mlx5dv_init_obj(QP, AH)");
	obj.ah.in = grh_ah;
	obj.ah.out = &dvgrh;
	CHECK(!mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH), "mlx5dv_init_obj(AH)");

	for (uint32_t i = 0; i < NPLAN; i++) {
		const struct datagram *d = &plan[i];
		struct ibv_sge sg = {(uintptr_t)src, d->len, mr->lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sg, .num_sge = 1}, *bad;
		struct ibv_qp *on = qp;

		for (uint32_t k = 0; k < d->len; k++)
			src[k] = pattern(i, k);
		wr.opcode = d->imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
		wr.imm_data = htonl(d->imm);
		wr.send_flags = IBV_SEND_SIGNALED | (d->path == VERBS_INLINE ? IBV_SEND_INLINE : 0);
		wr.wr.ud.ah = d->path == VERBS_GRH ? grh_ah : lid_ah;
		wr.wr.ud.remote_qpn = peer.qpn;
		wr.wr.ud.remote_qkey = d->qkey;
		switch (d->path) {
		case WR_API: {
			struct ibv_qp_ex *x = ibv_qp_to_qp_ex(wrqp);

			on = wrqp;
			ibv_wr_start(x);
			x->wr_id = i;
			x->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_send_imm(x, htonl(d->imm));
			ibv_wr_set_ud_addr(x, lid_ah, peer.qpn, d->qkey);
			ibv_wr_set_sge(x, mr->lkey, (uintptr_t)src, d->len);
			CHECK(!ibv_wr_complete(x), "ibv_wr_complete");
			break;
		}
		case DIRECT_COMPACT:
		case DIRECT_GRH:
		case DIRECT_MIXED:
			on = dqp;
			post_direct(dqp, &dvqp, d->path == DIRECT_GRH ? dvgrh.av : dvlid.av,
				    d->path != DIRECT_GRH, d->path == DIRECT_MIXED, peer.qpn, d, src);
			break;
		default:
			CHECK(!ibv_post_send(qp, &wr, &bad), "ibv_post_send %u", i);
		}
		/* the sender's completion is the same whether the wire delivers or drops it */
		wait_send(on, IBV_WC_SUCCESS, "send");
	}
	/* the receiver's last receive holds TINY bytes */
	{
		struct ibv_sge sg = {(uintptr_t)src, 64, mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 99, .sg_list = &sg, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;

		wr.wr.ud.ah = lid_ah;
		wr.wr.ud.remote_qpn = peer.qpn;
		wr.wr.ud.remote_qkey = QKEY;
		CHECK(!ibv_post_send(qp, &wr, &bad), "ibv_post_send");
		wait_send(qp, IBV_WC_SUCCESS, "send into the tiny receive");
		/* RDMA WRITE has no meaning on UD: the device refuses the WQE */
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr_id = 100;
		wr.wr.ud.ah = lid_ah;
		CHECK(!ibv_post_send(qp, &wr, &bad), "ibv_post_send(WRITE)");
		wait_send(qp, IBV_WC_LOC_QP_OP_ERR, "RDMA WRITE on UD");
		CHECK(qp_state(qp) == IBV_QPS_ERR, "QP not in error after LOC_QP_OP_ERR");
		wr.wr.ud.ah = NULL;
		wr.opcode = IBV_WR_SEND;
		CHECK(ibv_post_send(wrqp, &wr, &bad) == EINVAL, "a UD send without an AH accepted");
	}
	sync_peer(fd);
	sync_peer(fd);
	poll_n(cq, &rwc, 1, 30);
	CHECK(rwc.status == IBV_WC_SUCCESS && rwc.wr_id == 1000 && rwc.qp_num == wrqp->qp_num,
	      "reply: %s", ibv_wc_status_str(rwc.status));
	CHECK(rwc.byte_len == GRH + REPLY && (rwc.wc_flags & IBV_WC_GRH) && rwc.slid == peer.lid,
	      "reply: byte_len %u wc_flags %#x", rwc.byte_len, rwc.wc_flags);
	CHECK(!memcmp(((struct ibv_grh *)rbuf)->sgid.raw, peer.gid, 16), "reply: GRH source GID");
	for (uint32_t k = 0; k < REPLY; k++)
		CHECK(rbuf[GRH + k] == pattern(REPLY, k), "reply: byte %u", k);
	CHECK(!ibv_destroy_ah(lid_ah) && !ibv_destroy_ah(grh_ah), "ibv_destroy_ah");
	printf("client: %zu datagrams sent (verbs, inline, ibv_wr_*, direct WQEs with 16- and "
	       "48-byte AVs, inline + gather), WRITE on UD LOC_QP_OP_ERR, reply through "
	       "ibv_create_ah_from_wc received\n", NPLAN + 1);
	return 0;
}

/* ---- loopback ------------------------------------------------------------------------------- */

/* Two datagrams from one QP to another of the same process: the first without
 * IBV_SEND_SOLICITED raises no event on the receiver's CQ (armed for solicited completions),
 * the second with it does. */
static int loopback(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *rcq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL, *ev_cq;
	struct ibv_qp *tx = ud_qp(0), *rx;
	struct ibv_port_attr pa;
	struct ibv_ah_attr aa = {.port_num = 1};
	struct ibv_ah *ah;
	struct pollfd pfd;
	struct ibv_wc wc[2];
	void *ev_ctx;

	CHECK(rcq, "ibv_create_cq: %s", strerror(errno));
	cq = rcq;               /* the receiving QP completes into the armed CQ */
	rx = ud_qp(0);
	CHECK(!ibv_query_port(ctx, 1, &pa), "ibv_query_port");
	aa.dlid = pa.lid;
	ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "ibv_create_ah: %s", strerror(errno));
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sg = {(uintptr_t)(buf + i * BUF), BUF, mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1}, *bad;

		CHECK(!ibv_post_recv(rx, &wr, &bad), "ibv_post_recv");
	}
	CHECK(!ibv_req_notify_cq(rcq, 1), "ibv_req_notify_cq(solicited)");
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	for (int i = 0; i < 2; i++) {
		uint8_t *src = buf + NRECV * BUF;
		struct ibv_sge sg = {(uintptr_t)src, 100, mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 10, .sg_list = &sg, .num_sge = 1,
					 .opcode = IBV_WR_SEND_WITH_IMM}, *bad;
		struct ibv_wc sw;

		for (uint32_t k = 0; k < 100; k++)
			src[k] = pattern(50 + i, k);
		wr.imm_data = htonl(0x600u + (uint32_t)i);
		wr.send_flags = IBV_SEND_SIGNALED | (i ? IBV_SEND_SOLICITED : 0);
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = rx->qp_num;
		wr.wr.ud.remote_qkey = QKEY;
		CHECK(!ibv_post_send(tx, &wr, &bad), "ibv_post_send");
		CHECK(tx->send_cq != rcq, "send CQ");
		poll_n(tx->send_cq, &sw, 1, 30);
		CHECK(sw.status == IBV_WC_SUCCESS, "loopback send %d: %s", i, ibv_wc_status_str(sw.status));
		/* a UD send completes when it leaves, maybe before it is placed: give the
		 * unsolicited one 100 ms to (not) raise an event, the solicited one 10 s to raise it */
		CHECK((poll(&pfd, 1, i ? 10000 : 100) == 1) == !!i, "loopback %d: event %s", i,
		      i ? "missing" : "for an unsolicited datagram");
	}
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == rcq, "ibv_get_cq_event");
	ibv_ack_cq_events(rcq, 1);
	poll_n(rcq, wc, 2, 30);
	for (int i = 0; i < 2; i++) {
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)i &&
		      wc[i].byte_len == GRH + 100 && wc[i].src_qp == tx->qp_num && wc[i].slid == pa.lid &&
		      ntohl(wc[i].imm_data) == 0x600u + (uint32_t)i, "loopback receive %d", i);
		for (uint32_t k = 0; k < 100; k++)
			CHECK(buf[i * BUF + GRH + k] == pattern(50 + i, k), "loopback %d: byte %u", i, k);
	}
	printf("loopback: 2 datagrams between QPs of one process, completion event for the "
	       "solicited one only\n");
	return 0;
}

int main(int argc, char **argv)
{
	int port = 18600, opt, fd, lo = 0;
	const char *host = NULL;

	while ((opt = getopt(argc, argv, "p:l")) != -1) {
		if (opt == 'l')
			lo = 1;
		else
			port = atoi(optarg);
	}
	if (optind < argc)
		host = argv[optind];
	setup();
	if (lo)
		return loopback();
	fd = tcp_connect_or_accept(host, port);
	return host ? client(fd) : server(fd);
}
