/* Error paths, each with what hardware reports: protection and bounds violations, missing
 * access rights, receiver not ready, unreachable and dead peers, posting outside RTS, bad QP
 * state transitions, destroying resources still in use.
 *
 *   rdma_errors            runs every scenario, one line of results each; exit 0 when run
 *
 * QP pairs are connected to each other on the first device (loopback through the emulated
 * fabric); the dead-peer scenario forks a child process that owns the far QP and kills it.
 * The test compares every printed line with what InfiniBand hardware gives.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "common.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint16_t lid;

static const char *st(enum ibv_wc_status s)
{
	static const char *n[] = {"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR",
				  "LOC_PROT_ERR", "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR",
				  "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR",
				  "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR"};

	return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "OTHER";
}

static const char *qps(enum ibv_qp_state s)
{
	static const char *n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};

	return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

static const char *err(int e)
{
	switch (e) {
	case 0:
		return "0";
	case EINVAL:
		return "EINVAL";
	case ENOMEM:
		return "ENOMEM";
	case EBUSY:
		return "EBUSY";
	default:
		return strerror(e);
	}
}

struct end {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct peer_info info;
};

static void make_end(struct end *e, enum ibv_qp_type type, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2},
		.qp_type = type,
		.srq = srq,
	};

	memset(e, 0, sizeof(*e));
	e->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = e->cq;
	e->qp = ibv_create_qp(pd, &ia);
	CHECK(e->cq && e->qp, "create: %s", strerror(errno));
	e->srq = srq;
	e->info.qpn = e->qp->qp_num;
	e->info.lid = lid;
	e->info.psn = (uint32_t)lrand48() & 0xffffff;
}

static int to_init(struct ibv_qp *qp, unsigned access)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct end *e, uint32_t dqpn, uint16_t dlid, uint32_t rq_psn, int rc)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dqpn,
				.rq_psn = rq_psn, .max_dest_rd_atomic = 4, .min_rnr_timer = 1};

	a.ah_attr.dlid = dlid;
	a.ah_attr.port_num = 1;
	return ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN |
					   (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0));
}

static int to_rts(struct end *e, uint8_t timeout, uint8_t retry, uint8_t rnr_retry, int rc)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .sq_psn = e->info.psn, .timeout = timeout,
				.retry_cnt = retry, .rnr_retry = rnr_retry, .max_rd_atomic = 4};

	return ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
					   (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
							 IBV_QP_MAX_QP_RD_ATOMIC
					       : 0));
}

/* Two QPs of TYPE connected to each other; B allows ACCESS. */
static void make_pair(struct end *a, struct end *b, enum ibv_qp_type type, unsigned access,
		      uint8_t rnr_retry)
{
	int rc = type == IBV_QPT_RC;

	make_end(a, type, NULL);
	make_end(b, type, NULL);
	CHECK(!to_init(a->qp, 0) && !to_init(b->qp, access), "init");
	CHECK(!to_rtr(a, b->info.qpn, lid, b->info.psn, rc) && !to_rtr(b, a->info.qpn, lid, a->info.psn, rc),
	      "rtr");
	CHECK(!to_rts(a, 14, 7, rnr_retry, rc) && !to_rts(b, 14, 7, 7, rc), "rts");
}

static void free_end(struct end *e)
{
	ibv_destroy_qp(e->qp);
	ibv_destroy_cq(e->cq);
}

static int post_one(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, void *laddr, uint32_t len,
		    uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sg = {(uintptr_t)laddr, len, lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad = NULL;

	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sg = {(uintptr_t)addr, len, lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1}, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static struct ibv_wc wait1(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	poll_n(cq, &wc, 1, 20);
	return wc;
}

static enum ibv_qp_state state_of(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK(!ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), "query_qp");
	return a.qp_state;
}

static const char *async_event(void)
{
	struct ibv_async_event ev;
	static char name[64];
	double end = now_s() + 0.5;	/* events precede the completions that reveal them */

	/* the async fd blocks by default: poll it without hanging */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	while (ibv_get_async_event(ctx, &ev)) {
		if (now_s() > end)
			return "none";
		usleep(1000);
	}
	snprintf(name, sizeof(name), "%s", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	return name;
}

/* ---- scenarios ------------------------------------------------------------------------- */

static uint8_t *mem;
static struct ibv_mr *mr_all, *mr_nowrite, *mr_readonly;

/* A remote violation: the requester's WQE fails, the one after it is flushed, the responder
 * QP goes to the error state with an access event. */
static void remote_violation(const char *name, enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey,
			     unsigned access)
{
	struct end a, b;
	struct ibv_wc w1, w2;

	make_pair(&a, &b, IBV_QPT_RC, access, 7);
	CHECK(!post_one(a.qp, 1, op, mem, 8, mr_all->lkey, raddr, rkey), "post");
	CHECK(!post_one(a.qp, 2, IBV_WR_RDMA_WRITE, mem, 8, mr_all->lkey, (uintptr_t)mem + 4096,
			mr_all->rkey), "post 2");
	w1 = wait1(a.cq);
	w2 = wait1(a.cq);
	printf("%s: requester=%s next=%s requester_qp=%s responder_qp=%s event=%s\n", name,
	       st(w1.status), st(w2.status), qps(state_of(a.qp)), qps(state_of(b.qp)), async_event());
	free_end(&a);
	free_end(&b);
}

static void local_violation(const char *name, enum ibv_wr_opcode op, uint32_t lkey)
{
	struct end a, b;
	struct ibv_wc w1;

	make_pair(&a, &b, IBV_QPT_RC, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 7);
	CHECK(!post_one(a.qp, 1, op, mem, 64, lkey, (uintptr_t)mem + 8192, mr_all->rkey), "post");
	w1 = wait1(a.cq);
	printf("%s: requester=%s requester_qp=%s responder_qp=%s\n", name, st(w1.status),
	       qps(state_of(a.qp)), qps(state_of(b.qp)));
	free_end(&a);
	free_end(&b);
}

static void send_too_long(void)
{
	struct end a, b;
	struct ibv_wc wa, wb;

	make_pair(&a, &b, IBV_QPT_RC, 0, 7);
	CHECK(!post_recv(b.qp, 7, mem + 65536, 64, mr_all->lkey), "recv");
	CHECK(!post_one(a.qp, 1, IBV_WR_SEND, mem, 200, mr_all->lkey, 0, 0), "send");
	wa = wait1(a.cq);
	wb = wait1(b.cq);
	printf("send_too_long: requester=%s responder=%s responder_wr_id=%llu responder_qp=%s event=%s\n",
	       st(wa.status), st(wb.status), (unsigned long long)wb.wr_id, qps(state_of(b.qp)),
	       async_event());
	free_end(&a);
	free_end(&b);
}

static void rnr(void)
{
	struct end a, b;
	struct ibv_wc w;
	double t0;

	/* no receive posted and no RNR retries: the sender gives up */
	make_pair(&a, &b, IBV_QPT_RC, 0, 0);
	CHECK(!post_one(a.qp, 1, IBV_WR_SEND, mem, 16, mr_all->lkey, 0, 0), "send");
	w = wait1(a.cq);
	printf("rnr_retry_0: requester=%s requester_qp=%s responder_qp=%s\n", st(w.status),
	       qps(state_of(a.qp)), qps(state_of(b.qp)));
	free_end(&a);
	free_end(&b);
	/* RNR retries forever: the receive posted 30 ms later is found */
	make_pair(&a, &b, IBV_QPT_RC, 0, 7);
	t0 = now_s();
	CHECK(!post_one(a.qp, 1, IBV_WR_SEND, mem, 16, mr_all->lkey, 0, 0), "send");
	usleep(30000);
	CHECK(!post_recv(b.qp, 9, mem + 65536, 64, mr_all->lkey), "recv");
	w = wait1(a.cq);
	printf("rnr_retry_7: requester=%s receiver=%s after_ms>=30=%d\n", st(w.status),
	       st(wait1(b.cq).status), (now_s() - t0) >= 0.030);
	free_end(&a);
	free_end(&b);
}

static void wrong_qpn(void)
{
	struct end a, b;
	struct ibv_wc w;
	double t0;

	make_end(&a, IBV_QPT_RC, NULL);
	make_end(&b, IBV_QPT_RC, NULL);
	CHECK(!to_init(a.qp, 0) && !to_rtr(&a, 0xfffff0, lid, 0, 1), "rtr");
	CHECK(!to_rts(&a, 10, 2, 7, 1), "rts");	/* 4.2 ms timeout, 2 retries */
	t0 = now_s();
	CHECK(!post_one(a.qp, 1, IBV_WR_RDMA_WRITE, mem, 8, mr_all->lkey, (uintptr_t)mem, mr_all->rkey),
	      "post");
	w = wait1(a.cq);
	printf("no_such_qpn: requester=%s after_ms>=12=%d requester_qp=%s\n", st(w.status),
	       (now_s() - t0) >= 0.0125, qps(state_of(a.qp)));
	free_end(&a);
	free_end(&b);
}

/* The far QP belongs to a child process that is killed: requests time out. */
static void dead_peer(void)
{
	int to_child[2], to_parent[2];
	struct end a;
	struct peer_info far;
	struct ibv_wc w1, w2, w3;
	pid_t pid;
	char c;

	CHECK(!pipe(to_child) && !pipe(to_parent), "pipe");
	make_end(&a, IBV_QPT_RC, NULL);
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {	/* the peer: a process of its own, with its own HCA instance */
		struct ibv_port_attr p;
		struct ibv_mr *m;
		struct end b;
		struct peer_info pa;

		ctx = open_first_device();
		pd = ibv_alloc_pd(ctx);
		ibv_query_port(ctx, 1, &p);
		lid = p.lid;
		m = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
		make_end(&b, IBV_QPT_RC, NULL);
		xfer(to_parent[1], &b.info, sizeof(b.info), 1);
		xfer(to_child[0], &pa, sizeof(pa), 0);
		CHECK(!to_init(b.qp, IBV_ACCESS_REMOTE_WRITE) && !to_rtr(&b, pa.qpn, pa.lid, pa.psn, 1) &&
		      !to_rts(&b, 14, 7, 7, 1), "child connect");
		CHECK(!post_recv(b.qp, 1, mem, 64, m->lkey), "child recv");
		xfer(to_parent[1], &c, 1, 1);
		pause();	/* until killed */
		_exit(0);
	}
	xfer(to_parent[0], &far, sizeof(far), 0);
	xfer(to_child[1], &a.info, sizeof(a.info), 1);
	CHECK(!to_init(a.qp, 0) && !to_rtr(&a, far.qpn, far.lid, far.psn, 1) &&
	      !to_rts(&a, 12, 3, 7, 1), "connect");	/* 16.8 ms timeout, 3 retries */
	xfer(to_parent[0], &c, 1, 0);
	/* a send while the peer lives... */
	CHECK(!post_one(a.qp, 1, IBV_WR_SEND, mem, 8, mr_all->lkey, 0, 0), "post");
	w1 = wait1(a.cq);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* ...and two after it died: the first times out, the second is flushed */
	CHECK(!post_one(a.qp, 2, IBV_WR_SEND, mem, 8, mr_all->lkey, 0, 0), "post");
	CHECK(!post_one(a.qp, 3, IBV_WR_SEND, mem, 8, mr_all->lkey, 0, 0), "post");
	w2 = wait1(a.cq);
	w3 = wait1(a.cq);
	printf("dead_peer: alive=%s dead=%s after=%s requester_qp=%s\n", st(w1.status), st(w2.status),
	       st(w3.status), qps(state_of(a.qp)));
	free_end(&a);
}

static void post_outside_rts(void)
{
	struct end a, b;
	struct ibv_sge sg = {(uintptr_t)mem, 8, 0};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad = NULL;
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &sg, .num_sge = 1}, *rbad = NULL;
	int e_reset_send, e_reset_recv, e_init_send, e_rtr_send, e_init_recv;

	sg.lkey = mr_all->lkey;
	make_end(&a, IBV_QPT_RC, NULL);
	make_end(&b, IBV_QPT_RC, NULL);
	e_reset_send = ibv_post_send(a.qp, &wr, &bad);
	CHECK(bad == &wr, "bad_wr not set");
	e_reset_recv = ibv_post_recv(a.qp, &rw, &rbad);
	CHECK(rbad == &rw, "bad_wr not set");
	to_init(a.qp, 0);
	bad = NULL;
	e_init_send = ibv_post_send(a.qp, &wr, &bad);
	e_init_recv = ibv_post_recv(a.qp, &rw, &rbad);
	to_rtr(&a, b.info.qpn, lid, 0, 1);
	e_rtr_send = ibv_post_send(a.qp, &wr, &bad);
	printf("post_outside_rts: send_reset=%s recv_reset=%s send_init=%s recv_init=%s send_rtr=%s\n",
	       err(e_reset_send), err(e_reset_recv), err(e_init_send), err(e_init_recv), err(e_rtr_send));
	free_end(&a);
	free_end(&b);
}

static void transitions(void)
{
	struct end a, b;
	struct ibv_qp_attr at;
	int r[8];

	make_end(&a, IBV_QPT_RC, NULL);
	make_end(&b, IBV_QPT_RC, NULL);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	r[0] = ibv_modify_qp(a.qp, &at, IBV_QP_STATE);	/* RESET -> RTR */
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	r[1] = ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS); /* no port */
	at.port_num = 2;
	r[2] = ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	r[3] = to_init(a.qp, 0);					/* fine */
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	r[4] = ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN);	/* INIT -> RTS */
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = b.info.qpn;
	at.ah_attr.dlid = lid;
	at.ah_attr.port_num = 1;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 1;
	r[5] = ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER |
					     IBV_QP_SQ_PSN);	/* an attribute RTR does not take */
	r[6] = to_rtr(&a, b.info.qpn, lid, 0, 1);			/* fine */
	at.qp_state = IBV_QPS_ERR;
	ibv_modify_qp(a.qp, &at, IBV_QP_STATE);
	r[7] = to_rts(&a, 14, 7, 7, 1);				/* ERR -> RTS */
	printf("transitions: reset_to_rtr=%s init_without_port=%s init_port_2=%s init=%s "
	       "init_to_rts=%s rtr_extra_attr=%s rtr=%s err_to_rts=%s state=%s\n",
	       err(r[0]), err(r[1]), err(r[2]), err(r[3]), err(r[4]), err(r[5]), err(r[6]), err(r[7]),
	       qps(state_of(a.qp)));
	free_end(&a);
	free_end(&b);
}

static void destroy_in_use(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_pd *p = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(p, &sa);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .srq = srq,
				      .cap = {.max_send_wr = 4, .max_send_sge = 1}, .qp_type = IBV_QPT_RC};
	struct ibv_qp *qp = ibv_create_qp(p, &ia);
	struct ibv_mr *mr = ibv_reg_mr(p, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
	int pd_mr, cq_qp, srq_qp, ch_cq, pd_qp, ok;

	CHECK(ch && p && cq && srq && qp && mr, "create: %s", strerror(errno));
	pd_mr = ibv_dealloc_pd(p);
	cq_qp = ibv_destroy_cq(cq);
	srq_qp = ibv_destroy_srq(srq);
	ch_cq = ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(mr);
	pd_qp = ibv_dealloc_pd(p);
	ok = ibv_destroy_qp(qp) | ibv_destroy_srq(srq) | ibv_destroy_cq(cq) | ibv_destroy_comp_channel(ch) |
	     ibv_dealloc_pd(p);
	printf("destroy_in_use: pd_with_mr=%s cq_with_qp=%s srq_with_qp=%s channel_with_cq=%s "
	       "pd_with_qp=%s in_order=%s\n",
	       err(pd_mr), err(cq_qp), err(srq_qp), err(ch_cq), err(pd_qp), err(ok));
}

static void misc(void)
{
	struct end a, b;
	struct ibv_wc w;
	struct ibv_mr *bad;
	int n, e = 0;

	/* UC carries no READ: the device refuses the WQE */
	make_pair(&a, &b, IBV_QPT_UC, IBV_ACCESS_REMOTE_WRITE, 7);
	CHECK(!post_one(a.qp, 1, IBV_WR_RDMA_READ, mem, 8, mr_all->lkey, (uintptr_t)mem, mr_all->rkey),
	      "post");
	w = wait1(a.cq);
	printf("uc_read: requester=%s requester_qp=%s\n", st(w.status), qps(state_of(a.qp)));
	free_end(&a);
	free_end(&b);

	errno = 0;
	bad = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_REMOTE_WRITE);
	printf("reg_mr_remote_write_without_local_write: mr=%s errno=%s\n", bad ? "yes" : "NULL", err(errno));

	/* more than the send queue holds */
	make_pair(&a, &b, IBV_QPT_RC, IBV_ACCESS_REMOTE_WRITE, 7);
	{
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qia;

		ibv_query_qp(a.qp, &qa, IBV_QP_CAP, &qia);
		for (n = 0; n < 1000 && !e; n++)
			e = post_one(a.qp, (uint64_t)n, IBV_WR_RDMA_WRITE, mem, 8, mr_all->lkey,
				     (uintptr_t)mem, mr_all->rkey);
		printf("sq_overflow: accepted=%d max_send_wr=%u then=%s\n", n - 1, qia.cap.max_send_wr, err(e));
	}
	/* moving a QP with posted receives to ERR flushes them */
	{
		struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
		int flushed = 0;

		for (int i = 0; i < 5; i++)
			post_recv(b.qp, 100 + (uint64_t)i, mem + 65536, 64, mr_all->lkey);
		ibv_modify_qp(b.qp, &at, IBV_QP_STATE);
		for (int i = 0; i < 5; i++) {
			w = wait1(b.cq);
			flushed += w.status == IBV_WC_WR_FLUSH_ERR && w.wr_id == 100 + (uint64_t)i;
		}
		printf("flush: receives_flushed_in_order=%d\n", flushed);
	}
	free_end(&a);
	free_end(&b);
}

int main(void)
{
	struct ibv_port_attr pa;

	setvbuf(stdout, NULL, _IOLBF, 0);
	srand48(getpid());
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	CHECK(pd && !ibv_query_port(ctx, 1, &pa), "pd/port");
	lid = pa.lid;
	mem = aligned_alloc(4096, 1 << 20);
	memset(mem, 0, 1 << 20);
	mr_all = ibv_reg_mr(pd, mem, 1 << 20, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	mr_nowrite = ibv_reg_mr(pd, mem, 1 << 20, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	mr_readonly = ibv_reg_mr(pd, mem, 1 << 20, 0);
	CHECK(mr_all && mr_nowrite && mr_readonly, "reg_mr: %s", strerror(errno));

	unsigned all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	remote_violation("bad_rkey", IBV_WR_RDMA_WRITE, (uintptr_t)mem, mr_all->rkey ^ 0x4400, all);
	remote_violation("out_of_bounds", IBV_WR_RDMA_WRITE, (uintptr_t)mem + (1 << 20) - 4,
			 mr_all->rkey, all);
	remote_violation("mr_without_remote_write", IBV_WR_RDMA_WRITE, (uintptr_t)mem,
			 mr_nowrite->rkey, all);
	remote_violation("qp_without_remote_read", IBV_WR_RDMA_READ, (uintptr_t)mem, mr_all->rkey,
			 IBV_ACCESS_REMOTE_WRITE);
	remote_violation("misaligned_atomic", IBV_WR_ATOMIC_FETCH_AND_ADD, (uintptr_t)mem + 4,
			 mr_all->rkey, all);
	local_violation("bad_lkey", IBV_WR_RDMA_WRITE, mr_all->lkey ^ 0x4400);
	local_violation("read_into_readonly_mr", IBV_WR_RDMA_READ, mr_readonly->lkey);
	send_too_long();
	rnr();
	wrong_qpn();
	dead_peer();
	post_outside_rts();
	transitions();
	destroy_in_use();
	misc();
	ibv_dereg_mr(mr_all);
	ibv_dereg_mr(mr_nowrite);
	ibv_dereg_mr(mr_readonly);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("done\n");
	return 0;
}
