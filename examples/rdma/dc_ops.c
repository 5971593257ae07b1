/* Dynamically connected transport (mlx5 DC) between two processes, or within one: a DCT
 * (mlx5dv_create_qp, MLX5DV_DCTYPE_DCT, in a parent domain of the PD its buffer is registered
 * in, with an SRQ, as NVSHMEM's IBGDA makes them) on the server, a DCI on the client posting through
 * ibv_wr_* with mlx5dv_wr_set_dc_addr, each work request naming the DCT and its access key.
 *
 *   dc_ops [-p PORT]            server: a DCT with an SRQ, checks what arrived
 *   dc_ops [-p PORT] HOST       client: one DCI posts the plan below, then a WRITE with a
 *                               wrong DC key
 *   dc_ops -l                   loopback: both in one process (two DCTs, one DCI alternating
 *                               between them)
 *   dc_ops -x                   loopback, bad addresses: a WRITE whose address was never set
 *                               (IBV_WC_LOC_PROT_ERR), one naming a DCT that does not exist and
 *                               one with a wrong key (IBV_WC_RETRY_EXC_ERR: nobody answers), one
 *                               with an R_Key the DCT lacks (IBV_WC_REM_ACCESS_ERR); the
 *                               DCI is reset after each, then a good WRITE succeeds; then a
 *                               WRITE to a DCT still in INIT, made ready 2 ms later: the DCI's
 *                               retransmission reconnects, the WRITE lands
 *
 * The plan: RDMA WRITEs (1, 100 and 4096 bytes), RDMA READs (8 and 2048 bytes), a fetch-and-
 * add and a compare-and-swap, two SENDs (the second with an immediate) into the DCT's SRQ.
 * The client checks every completion, every READ's bytes and both atomics' old values; the
 * server checks its buffer, its counter and both receives.  A WRITE with another key is not
 * answered by the DCT, as on a ConnectX: it completes with IBV_WC_RETRY_EXC_ERR.
 * First line: `caps: dct=D compact_address_vector=C cqe_version=V log_bf_reg_size=B`, general
 * capabilities (QUERY_HCA_CAP through DevX): the last three are what NVSHMEM's IBGDA reads; `dct`
 * says whether DevX can make DCTs (CREATE_DCT, as UCX's dc_mlx5 makes them).
 * The last line printed is `dc_ops: ok writes=W reads=R atomics=A sends=S bad_key=1 dct=N
 * key=K` (the counts a trace must hold).  Exit status 0 only when everything matched.
 */
#include <inttypes.h>

#include <infiniband/mlx5dv.h>
#include <sigmatrace/mlx5_prm.h>

#include "common.h"

#define DC_KEY 0x5623ceafull
#define BAD_KEY 0x1badc0deull
#define BUF 16384
#define READ_OFF 8192           /* what the READs fetch: 2048 bytes */
#define CNT_OFF 6144            /* the 8-byte counter the atomics work on */
#define RECV_OFF 4096           /* the receives' buffers: 2 x 1024 bytes */
#define NWRITES 3
#define NREADS 2
#define NSENDS 2

static const uint32_t write_len[NWRITES] = {1, 100, 4096};
static const uint32_t write_off[NWRITES] = {0, 16, 0};
static const uint32_t read_len[NREADS] = {8, 2048};
static const uint32_t send_len[NSENDS] = {64, 1000};

struct dct_side {
	struct ibv_pd *domain;  /* a parent domain of the PD, as NVSHMEM makes its DCTs in */
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_qp *dct;
	uint8_t *buf;
	struct ibv_mr *mr;
};

struct dc_info {
	struct peer_info p;     /* qpn: the DCT number */
	uint64_t key;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static uint8_t pattern(uint32_t i, uint32_t off)
{
	return (uint8_t)(i * 31 + off * 7 + 1);
}

static void print_caps(void)
{
	uint8_t in[16] = {0}, *out = calloc(1, PRM_HCA_CAP_OUT_SIZE);

	CHECK(out, "calloc");
	prm_set(in, PRM_IN_OPCODE, PRM_CMD_QUERY_HCA_CAP);
	prm_set(in, PRM_IN_OP_MOD, PRM_CAP_TYPE_GENERAL << 1 | 1);
	CHECK(!mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out, PRM_HCA_CAP_OUT_SIZE) && !prm_get(out, PRM_OUT_STATUS),
	      "QUERY_HCA_CAP");
	printf("caps: dct=%u compact_address_vector=%u cqe_version=%u log_bf_reg_size=%u\n", prm_get(out, PRM_CAP_DCT),
	       prm_get(out, PRM_CAP_COMPACT_ADDRESS_VECTOR), prm_get(out, PRM_CAP_CQE_VERSION),
	       prm_get(out, PRM_CAP_LOG_BF_REG_SIZE));
	free(out);
}

static void make_dct_at(struct dct_side *s, uint64_t key, int ready);

static void make_dct(struct dct_side *s, uint64_t key)
{
	make_dct_at(s, key, 1);
}

/* INIT -> RTR: the DCT answers from now on. */
static void dct_ready(struct dct_side *s)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(s->dct, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER),
	      "DCT to RTR");
}

/* A DCT with its buffer, SRQ and CQ, left in INIT unless READY. */
static void make_dct_at(struct dct_side *s, uint64_t key, int ready)
{
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_parent_domain_init_attr pa = {.pd = pd};
	struct ibv_qp_init_attr_ex qa;
	struct mlx5dv_qp_init_attr dv;
	struct ibv_qp_attr a;

	s->buf = calloc(1, BUF);
	CHECK(s->buf, "calloc");
	s->mr = ibv_reg_mr(pd, s->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr, "ibv_reg_mr: %s", strerror(errno));
	s->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(s->cq, "ibv_create_cq");
	/* the SRQ and the DCT in a parent domain of the buffer's PD (NVSHMEM's IBGDA does so) */
	s->domain = ibv_alloc_parent_domain(ctx, &pa);
	CHECK(s->domain, "ibv_alloc_parent_domain: %s", strerror(errno));
	s->srq = ibv_create_srq(s->domain, &sa);
	CHECK(s->srq, "ibv_create_srq: %s", strerror(errno));
	for (int i = 0; i < NSENDS; i++) {
		struct ibv_sge sg = {(uintptr_t)s->buf + RECV_OFF + 1024 * i, 1024, s->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 100 + i, .sg_list = &sg, .num_sge = 1}, *bad;

		CHECK(!ibv_post_srq_recv(s->srq, &wr, &bad), "ibv_post_srq_recv");
	}
	memset(&qa, 0, sizeof(qa));
	memset(&dv, 0, sizeof(dv));
	qa.qp_type = IBV_QPT_DRIVER;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD;
	qa.pd = s->domain;
	qa.send_cq = s->cq;
	qa.recv_cq = s->cq;
	qa.srq = s->srq;
	dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
	dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
	dv.dc_init_attr.dct_access_key = key;
	s->dct = mlx5dv_create_qp(ctx, &qa, &dv);
	CHECK(s->dct, "mlx5dv_create_qp (DCT): %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
			    IBV_ACCESS_LOCAL_WRITE;
	CHECK(!ibv_modify_qp(s->dct, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "DCT to INIT");
	if (ready)
		dct_ready(s);
	*(uint64_t *)(s->buf + CNT_OFF) = 1000;
	for (uint32_t i = 0; i < 2048; i++)
		s->buf[READ_OFF + i] = pattern(9, i);
}

static void dct_info(struct dct_side *s, uint64_t key, struct dc_info *me)
{
	memset(me, 0, sizeof(*me));
	fill_local_info(ctx, s->dct, &me->p);
	me->p.rkey = s->mr->rkey;
	me->p.addr = (uintptr_t)s->buf;
	me->p.len = BUF;
	me->key = key;
}

/* The DCT side's checks once the client is done: the WRITEs' bytes, the counter after
 * fetch-add 5 then compare-and-swap 1005 -> 77, both receives. */
static int check_dct(struct dct_side *s)
{
	struct ibv_wc wc[NSENDS];
	int bad = 0;

	for (uint32_t i = 0; i < write_len[2]; i++)     /* the last WRITE covers bytes 0..4095 */
		if (s->buf[i] != pattern(2, i))
			bad++;
	if (*(uint64_t *)(s->buf + CNT_OFF) != 77)
		bad++, fprintf(stderr, "counter %" PRIu64 ", expected 77\n", *(uint64_t *)(s->buf + CNT_OFF));
	poll_n(s->cq, wc, NSENDS, 10);
	for (int i = 0; i < NSENDS; i++) {
		uint8_t *r = s->buf + RECV_OFF + 1024 * (wc[i].wr_id - 100);

		if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV ||
		    wc[i].byte_len != send_len[i] || wc[i].qp_num != s->dct->qp_num ||
		    (i == 1) != !!(wc[i].wc_flags & IBV_WC_WITH_IMM) ||
		    (i == 1 && ntohl(wc[i].imm_data) != 0xfeed)) {
			fprintf(stderr, "receive %d: status %d opcode %d len %u qpn %#x\n", i,
				wc[i].status, wc[i].opcode, wc[i].byte_len, wc[i].qp_num);
			bad++;
			continue;
		}
		for (uint32_t b = 0; b < send_len[i]; b++)
			if (r[b] != pattern(20 + i, b)) {
				bad++;
				break;
			}
	}
	if (bad)
		fprintf(stderr, "DCT side: %d mismatches\n", bad);
	return bad;
}

struct dci_side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct mlx5dv_qp_ex *dvx;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static void make_dci(struct dci_side *c)
{
	struct ibv_qp_init_attr_ex qa;
	struct mlx5dv_qp_init_attr dv;
	struct ibv_qp_attr a;

	c->buf = calloc(1, BUF);
	CHECK(c->buf, "calloc");
	c->mr = ibv_reg_mr(pd, c->buf, BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(c->mr, "ibv_reg_mr");
	c->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(c->cq, "ibv_create_cq");
	memset(&qa, 0, sizeof(qa));
	memset(&dv, 0, sizeof(dv));
	qa.qp_type = IBV_QPT_DRIVER;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.pd = pd;
	qa.send_cq = c->cq;
	qa.recv_cq = c->cq;
	qa.cap.max_send_wr = 32;
	qa.cap.max_send_sge = 1;
	qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND |
			    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
			    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
	dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
	dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
	c->qp = mlx5dv_create_qp(ctx, &qa, &dv);
	CHECK(c->qp, "mlx5dv_create_qp (DCI): %s", strerror(errno));
	c->qpx = ibv_qp_to_qp_ex(c->qp);
	CHECK(c->qpx, "ibv_qp_to_qp_ex");
	c->dvx = mlx5dv_qp_ex_from_ibv_qp_ex(c->qpx);
	CHECK(c->dvx, "mlx5dv_qp_ex_from_ibv_qp_ex");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	CHECK(!ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), "DCI to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	CHECK(!ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU), "DCI to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 10;         /* 4 ms: the wrong key's retries end soon */
	a.retry_cnt = 2;
	a.rnr_retry = 7;
	a.max_rd_atomic = 16;
	CHECK(!ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "DCI to RTS");
}

/* Posts one work request on the DCI toward the DCT of INFO (through AH) and waits for it. */
enum op { WRITE, READ, FADD, CSWAP, SEND, SEND_IMM };

static struct ibv_wc post_one(struct dci_side *c, struct ibv_ah *ah, const struct dc_info *t, uint64_t key,
			      enum op op, uint64_t raddr, uint32_t loff, uint32_t len, uint64_t a1, uint64_t a2)
{
	struct ibv_wc wc;

	ibv_wr_start(c->qpx);
	c->qpx->wr_id = op;
	c->qpx->wr_flags = IBV_SEND_SIGNALED;
	switch (op) {
	case WRITE: ibv_wr_rdma_write(c->qpx, t->p.rkey, raddr); break;
	case READ: ibv_wr_rdma_read(c->qpx, t->p.rkey, raddr); break;
	case FADD: ibv_wr_atomic_fetch_add(c->qpx, t->p.rkey, raddr, a1); break;
	case CSWAP: ibv_wr_atomic_cmp_swp(c->qpx, t->p.rkey, raddr, a1, a2); break;
	case SEND: ibv_wr_send(c->qpx); break;
	case SEND_IMM: ibv_wr_send_imm(c->qpx, htonl(0xfeed)); break;
	}
	mlx5dv_wr_set_dc_addr(c->dvx, ah, t->p.qpn, key);
	ibv_wr_set_sge(c->qpx, c->mr->lkey, (uintptr_t)c->buf + loff, len);
	CHECK(!ibv_wr_complete(c->qpx), "ibv_wr_complete");
	poll_n(c->cq, &wc, 1, 10);
	return wc;
}

static struct ibv_ah *ah_to(const struct dc_info *t)
{
	struct ibv_ah_attr aa = {.dlid = t->p.lid, .port_num = 1};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);

	CHECK(ah, "ibv_create_ah: %s", strerror(errno));
	return ah;
}

/* The plan toward T; returns mismatches. */
static int run_plan(struct dci_side *c, const struct dc_info *t)
{
	struct ibv_ah *ah = ah_to(t);
	struct ibv_wc wc;
	int bad = 0;

#define EXPECT(cond, ...) do { if (!(cond)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); bad++; } } while (0)
	for (int i = 0; i < NWRITES; i++) {
		for (uint32_t b = 0; b < write_len[i]; b++)
			c->buf[b] = pattern((uint32_t)i, write_off[i] + b);
		wc = post_one(c, ah, t, t->key, WRITE, t->p.addr + write_off[i], 0, write_len[i], 0, 0);
		EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "write %d: status %d", i, wc.status);
	}
	for (int i = 0; i < NREADS; i++) {
		memset(c->buf + 4096, 0, read_len[i]);
		wc = post_one(c, ah, t, t->key, READ, t->p.addr + READ_OFF, 4096, read_len[i], 0, 0);
		EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ, "read %d: status %d", i, wc.status);
		for (uint32_t b = 0; b < read_len[i]; b++)
			if (c->buf[4096 + b] != pattern(9, b)) {
				EXPECT(0, "read %d: byte %u", i, b);
				break;
			}
	}
	wc = post_one(c, ah, t, t->key, FADD, t->p.addr + CNT_OFF, 6144, 8, 5, 0);
	EXPECT(wc.status == IBV_WC_SUCCESS && *(uint64_t *)(c->buf + 6144) == 1000, "fetch-add: status %d old %" PRIu64,
	       wc.status, *(uint64_t *)(c->buf + 6144));
	wc = post_one(c, ah, t, t->key, CSWAP, t->p.addr + CNT_OFF, 6152, 8, 1005, 77);
	EXPECT(wc.status == IBV_WC_SUCCESS && *(uint64_t *)(c->buf + 6152) == 1005, "compare-swap: status %d old %" PRIu64,
	       wc.status, *(uint64_t *)(c->buf + 6152));
	for (int i = 0; i < NSENDS; i++) {
		for (uint32_t b = 0; b < send_len[i]; b++)
			c->buf[b] = pattern(20 + (uint32_t)i, b);
		wc = post_one(c, ah, t, t->key, i ? SEND_IMM : SEND, 0, 0, send_len[i], 0, 0);
		EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "send %d: status %d", i, wc.status);
	}
	ibv_destroy_ah(ah);
	return bad;
}

/* A WRITE with the wrong key: the DCT drops it, the DCI's retries run out. */
static int run_bad_key(struct dci_side *c, const struct dc_info *t)
{
	struct ibv_ah *ah = ah_to(t);
	struct ibv_wc wc = post_one(c, ah, t, BAD_KEY, WRITE, t->p.addr + 5000, 0, 32, 0, 0);

	ibv_destroy_ah(ah);
	if (wc.status != IBV_WC_RETRY_EXC_ERR) {
		fprintf(stderr, "wrong key: status %d (%s), expected IBV_WC_RETRY_EXC_ERR\n", wc.status,
			ibv_wc_status_str(wc.status));
		return 1;
	}
	return 0;
}

/* Back to RTS after an error completion (the DCI went to the error state). */
static void reset_dci(struct dci_side *c, uint8_t timeout)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
	struct ibv_wc wc[8];

	CHECK(!ibv_modify_qp(c->qp, &a, IBV_QP_STATE), "DCI to RESET");
	while (ibv_poll_cq(c->cq, 8, wc) > 0)
		;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	CHECK(!ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PORT), "DCI to INIT");
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	CHECK(!ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU), "DCI to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = 2;
	a.rnr_retry = 7;
	CHECK(!ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY),
	      "DCI to RTS");
}

/* -x: addresses no DCT answers, each an error completion; then a good WRITE. */
static int run_garbage(struct dci_side *c, const struct dc_info *t)
{
	struct ibv_ah *ah = ah_to(t);
	struct dc_info none = *t;
	struct ibv_wc wc;
	int bad = 0;

	/* no mlx5dv_wr_set_dc_addr: the datagram segment stays zero, a 16-byte AV (no extended
	 * bit) naming DCT 0, so the device reads the rest of the 48 bytes as the remote address
	 * and a data segment of lkey 0: a local protection error */
	ibv_wr_start(c->qpx);
	c->qpx->wr_id = 1;
	c->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(c->qpx, t->p.rkey, t->p.addr);
	ibv_wr_set_sge(c->qpx, c->mr->lkey, (uintptr_t)c->buf, 16);
	CHECK(!ibv_wr_complete(c->qpx), "ibv_wr_complete");
	poll_n(c->cq, &wc, 1, 10);
	if (wc.status != IBV_WC_LOC_PROT_ERR)
		bad++, fprintf(stderr, "no address: status %s\n", ibv_wc_status_str(wc.status));
	reset_dci(c, 10);
	none.p.qpn = (t->p.qpn + 4096) & 0xffffff;     /* nobody has that DCT number */
	wc = post_one(c, ah, &none, t->key, WRITE, t->p.addr, 0, 16, 0, 0);
	if (wc.status != IBV_WC_RETRY_EXC_ERR)
		bad++, fprintf(stderr, "no such DCT: status %s\n", ibv_wc_status_str(wc.status));
	reset_dci(c, 10);
	wc = post_one(c, ah, t, BAD_KEY, WRITE, t->p.addr, 0, 16, 0, 0);
	if (wc.status != IBV_WC_RETRY_EXC_ERR)
		bad++, fprintf(stderr, "wrong key: status %s\n", ibv_wc_status_str(wc.status));
	reset_dci(c, 10);
	/* the right DCT and key, an R_Key it does not have: the DCT refuses (NAK), stays ready */
	none = *t;
	none.p.rkey = t->p.rkey + 0x1000;
	wc = post_one(c, ah, &none, t->key, WRITE, t->p.addr, 0, 16, 0, 0);
	if (wc.status != IBV_WC_REM_ACCESS_ERR)
		bad++, fprintf(stderr, "bad rkey: status %s\n", ibv_wc_status_str(wc.status));
	reset_dci(c, 10);
	memset(c->buf, 0x5a, 16);
	wc = post_one(c, ah, t, t->key, WRITE, t->p.addr + 5000, 0, 16, 0, 0);
	if (wc.status != IBV_WC_SUCCESS)
		bad++, fprintf(stderr, "good write after the errors: status %s\n", ibv_wc_status_str(wc.status));
	ibv_destroy_ah(ah);
	return bad;
}

/* A DCT still in INIT drops the connection; it becomes ready 2 ms later, within the DCI's
 * first timeout (17 ms): the retransmission reconnects and the WRITE lands. */
static int run_late_dct(struct dci_side *c)
{
	struct dct_side late;
	struct dc_info t;
	struct ibv_ah *ah;
	struct ibv_wc wc;

	reset_dci(c, 12);
	make_dct_at(&late, DC_KEY, 0);
	dct_info(&late, DC_KEY, &t);
	ah = ah_to(&t);
	memset(c->buf, 0x6b, 16);
	ibv_wr_start(c->qpx);
	c->qpx->wr_id = 2;
	c->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(c->qpx, t.p.rkey, t.p.addr + 5000);
	mlx5dv_wr_set_dc_addr(c->dvx, ah, t.p.qpn, t.key);
	ibv_wr_set_sge(c->qpx, c->mr->lkey, (uintptr_t)c->buf, 16);
	CHECK(!ibv_wr_complete(c->qpx), "ibv_wr_complete");
	usleep(2000);
	dct_ready(&late);
	poll_n(c->cq, &wc, 1, 10);
	ibv_destroy_ah(ah);
	if (wc.status != IBV_WC_SUCCESS || late.buf[5000] != 0x6b || late.buf[5015] != 0x6b) {
		fprintf(stderr, "late DCT: status %s\n", ibv_wc_status_str(wc.status));
		return 1;
	}
	return 0;
}

static void summary(const struct dc_info *t, int rounds)
{
	printf("dc_ops: ok writes=%d reads=%d atomics=%d sends=%d bad_key=1 dct=%u key=%#" PRIx64 "\n",
	       NWRITES * rounds, NREADS * rounds, 2 * rounds, NSENDS * rounds, t->p.qpn, t->key);
}

int main(int argc, char **argv)
{
	const char *host = NULL;
	int port = 18600, loop = 0, garbage = 0, opt, bad = 0;

	while ((opt = getopt(argc, argv, "p:lx")) != -1) {
		if (opt == 'p')
			port = atoi(optarg);
		else if (opt == 'l')
			loop = 1;
		else if (opt == 'x')
			garbage = 1;
		else
			DIE("usage: dc_ops [-p PORT] [HOST] | dc_ops -l | dc_ops -x");
	}
	if (optind < argc)
		host = argv[optind];
	srand48(getpid());
	{
		/* a DevX context, as the capability query needs on a ConnectX */
		struct ibv_device **list = ibv_get_device_list(NULL);
		struct mlx5dv_context_attr ca = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};

		CHECK(list && list[0], "no RDMA device");
		ctx = mlx5dv_open_device(list[0], &ca);
		CHECK(ctx, "mlx5dv_open_device: %s", strerror(errno));
		ibv_free_device_list(list);
	}
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	print_caps();
	if (garbage) {
		struct dct_side s;
		struct dc_info t;
		struct dci_side c;

		make_dct(&s, DC_KEY);
		dct_info(&s, DC_KEY, &t);
		make_dci(&c);
		bad = run_garbage(&c, &t);
		if (bad || s.buf[5000] != 0x5a)
			return 1;
		if (run_late_dct(&c))
			return 1;
		printf("dc_ops: unset address LOC_PROT_ERR, no such DCT RETRY_EXC_ERR, wrong key RETRY_EXC_ERR, "
		       "bad rkey REM_ACCESS_ERR, then a good write; a DCT ready late: written after a retry\n");
		return 0;
	}
	if (loop) {
		/* one DCI, two DCTs of this process: the DCI reconnects between them */
		struct dct_side s[2];
		struct dc_info t[2];
		struct dci_side c;

		for (int i = 0; i < 2; i++) {
			make_dct(&s[i], DC_KEY + (uint64_t)i);
			dct_info(&s[i], DC_KEY + (uint64_t)i, &t[i]);
		}
		make_dci(&c);
		for (int i = 0; i < 2; i++)
			bad += run_plan(&c, &t[i]);
		for (int i = 0; i < 2; i++)
			bad += check_dct(&s[i]);
		bad += run_bad_key(&c, &t[0]);
		if (bad)
			return 1;
		summary(&t[0], 2);
		return 0;
	}
	if (!host) {
		struct dct_side s;
		struct dc_info me, peer;
		int fd;

		make_dct(&s, DC_KEY);
		dct_info(&s, DC_KEY, &me);
		fd = tcp_connect_or_accept(NULL, port);
		xfer(fd, &me, sizeof(me), 1);
		xfer(fd, &peer, sizeof(peer), 0);
		sync_peer(fd);          /* the client is done */
		bad = check_dct(&s);
		sync_peer(fd);
		if (bad)
			return 1;
		summary(&me, 1);
		return 0;
	} else {
		struct dci_side c;
		struct dc_info me, peer;
		int fd;

		make_dci(&c);
		memset(&me, 0, sizeof(me));
		fd = tcp_connect_or_accept(host, port);
		xfer(fd, &me, sizeof(me), 1);
		xfer(fd, &peer, sizeof(peer), 0);
		bad = run_plan(&c, &peer);
		sync_peer(fd);
		sync_peer(fd);          /* the server checked */
		bad += run_bad_key(&c, &peer);
		if (bad)
			return 1;
		summary(&peer, 1);
		return 0;
	}
}
