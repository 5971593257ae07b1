/* The extended verbs as real stacks call them, in one process on one emulated HCA.
 *
 * Queries (ibv_query_device_ex, ibv_query_port inline and at IBVERBS_1.1, the port query
 * of a newer rdma-core's larger struct, ibv_query_gid_ex / _table), ibv_reg_dmabuf_mr as
 * NCCL probes it, ibv_reg_mr_iova2, then two RC QPs of ibv_create_qp_ex connected to each
 * other, posting with ibv_wr_* and polling two ibv_cq_ex interleaved.  Each step prints one
 * line; tests/simnic/test_ex_verbs.py compares them.  Exit status 2 on a failed check. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/mman.h>

#include "common.h"

static const char *err_name(int e)
{
	switch (e) {
	case 0: return "0";
	case EINVAL: return "EINVAL";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENODATA: return "ENODATA";
	case ENOSYS: return "ENOSYS";
	default: return strerror(e);
	}
}

static void queries(struct ibv_context *ctx)
{
	struct ibv_query_device_ex_input in = {.comp_mask = 1};
	struct ibv_device_attr_ex dx;
	struct ibv_port_attr pa;
	struct verbs_context *vctx = verbs_get_ctx(ctx);
	int (*query_port_1_1)(struct ibv_context *, uint8_t, void *);
	uint8_t raw[64];
	struct ibv_gid_entry ge[4];
	uint32_t speed_ex;
	ssize_t n;
	int ret;

	memset(&dx, 0xff, sizeof(dx));
	ret = ibv_query_device_ex(ctx, NULL, &dx);
	printf("query_device_ex: %s part %u ports %u clock_khz %llu ts_mask %llx fetch_add %u\n",
	       err_name(ret), dx.orig_attr.vendor_part_id, (unsigned)dx.phys_port_cnt_ex,
	       (unsigned long long)dx.hca_core_clock,
	       (unsigned long long)dx.completion_timestamp_mask, dx.pci_atomic_caps.fetch_add);
	printf("query_device_ex cap_flags_ex: %d\n",
	       dx.device_cap_flags_ex == dx.orig_attr.device_cap_flags && dx.device_cap_flags_ex);
	{
		uint8_t big[sizeof(dx) + 64];

		memset(big, 0xff, sizeof(big));
		ret = vctx->query_device_ex(ctx, NULL, (struct ibv_device_attr_ex *)big, sizeof(big));
		printf("query_device_ex newer struct: %s tail_zero %d\n", err_name(ret),
		       !big[sizeof(dx)] && !big[sizeof(big) - 1]);
		ret = vctx->query_device_ex(ctx, NULL, (struct ibv_device_attr_ex *)big, 16);
		printf("query_device_ex 16 bytes: %s\n", err_name(ret));
	}
	printf("query_device_ex comp_mask 1: %s\n", err_name(ibv_query_device_ex(ctx, &in, &dx)));
	ret = vctx->query_device_ex(ctx, &in, &dx, sizeof(dx));
	printf("provider query_device_ex comp_mask 1: %s\n", err_name(ret));

	memset(&pa, 0xff, sizeof(pa));
	ret = ibv_query_port(ctx, 1, &pa);
	printf("query_port: %s state %d mtu %d width %u speed %u link %u flags %u cap2 %#x\n",
	       err_name(ret), pa.state, pa.active_mtu, pa.active_width, pa.active_speed,
	       pa.link_layer, pa.flags, pa.port_cap_flags2);
	printf("query_port port 2: %s\n", err_name(ibv_query_port(ctx, 2, &pa)));

	/* The exported function takes rdma-core's old struct (up to `flags`, 48 bytes) and
	 * writes nothing past it, as NCCL's dlvsym'ed call expects. */
	query_port_1_1 = dlvsym(RTLD_DEFAULT, "ibv_query_port", "IBVERBS_1.1");
	CHECK(query_port_1_1, "dlvsym ibv_query_port@IBVERBS_1.1");
	memset(raw, 0xff, sizeof(raw));
	ret = query_port_1_1(ctx, 1, raw);
	printf("query_port@IBVERBS_1.1: %s flags %u lid_set %d untouched_from_48 %d\n", err_name(ret),
	       raw[47], ((struct ibv_port_attr *)raw)->lid != 0xffff,
	       raw[48] == 0xff && raw[63] == 0xff);

	/* A program built against a newer rdma-core passes its larger struct's size: 56 bytes
	 * with active_speed_ex at 52; fields past what the device knows are zeroed. */
	memset(raw, 0xff, sizeof(raw));
	ret = vctx->query_port(ctx, 1, (struct ibv_port_attr *)raw, 56);
	memcpy(&speed_ex, raw + 52, 4);
	printf("query_port len 56: %s active_speed_ex %u beyond_untouched %d\n", err_name(ret),
	       speed_ex, raw[56] == 0xff);
	memset(raw, 0xff, sizeof(raw));
	ret = vctx->query_port(ctx, 1, (struct ibv_port_attr *)raw, 64);
	printf("query_port len 64: %s tail_zero %d\n", err_name(ret),
	       !raw[56] && !raw[60] && !raw[63]);

	memset(ge, 0xff, sizeof(ge));
	ret = ibv_query_gid_ex(ctx, 1, 0, &ge[0], 0);
	printf("query_gid_ex 0: %s type %u index %u port %u prefix %016llx\n", err_name(ret),
	       ge[0].gid_type, ge[0].gid_index, ge[0].port_num,
	       (unsigned long long)be64toh(ge[0].gid.global.subnet_prefix));
	printf("query_gid_ex 1: %s\n", err_name(ibv_query_gid_ex(ctx, 1, 1, &ge[1], 0)));
	printf("query_gid_ex flags 1: %s\n", err_name(ibv_query_gid_ex(ctx, 1, 0, &ge[1], 1)));
	n = ibv_query_gid_table(ctx, ge, 4, 0);
	printf("query_gid_table: %zd entries, first index %u type %u\n", n, ge[0].gid_index,
	       ge[0].gid_type);
}

static void dmabuf(struct ibv_pd *pd)
{
	struct ibv_mr *mr;
	int fd;

	/* NCCL's probe of dma-buf support */
	errno = 0;
	mr = ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0);
	printf("reg_dmabuf_mr probe: %s errno %s\n", mr ? "mr" : "NULL", err_name(errno));
	fd = memfd_create("dmabuf-standin", 0);
	CHECK(fd >= 0 && !ftruncate(fd, 4096), "memfd");
	errno = 0;
	mr = ibv_reg_dmabuf_mr(pd, 0, 4096, 0, fd, IBV_ACCESS_LOCAL_WRITE);
	printf("reg_dmabuf_mr fd: %s errno %s\n", mr ? "mr" : "NULL", err_name(errno));
	close(fd);
}

static const char *mr_result(struct ibv_mr *mr)
{
	static char buf[32];

	if (mr) {
		CHECK(!ibv_dereg_mr(mr), "ibv_dereg_mr");
		return "mr";
	}
	snprintf(buf, sizeof(buf), "NULL errno %s", errno == EFAULT ? "EFAULT" : err_name(errno));
	return buf;
}

/* Ranges the kernel could not pin are refused at registration, as on hardware. */
static void registration(struct ibv_pd *pd)
{
	const size_t pg = 4096;
	uint8_t *m = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;
	int ret;

	CHECK(m != MAP_FAILED, "mmap");
	CHECK(!munmap(m + pg, pg) && !mprotect(m + 2 * pg, pg, PROT_READ) &&
	      !mprotect(m + 3 * pg, pg, PROT_NONE), "munmap/mprotect");
	/* m: read-write | hole | read-only | no access */
	errno = 0;
	printf("reg_mr read-write page: %s\n", mr_result(ibv_reg_mr(pd, m, pg, IBV_ACCESS_LOCAL_WRITE)));
	printf("reg_mr over a hole: %s\n", mr_result(ibv_reg_mr(pd, m, 3 * pg, 0)));
	printf("reg_mr unmapped page: %s\n", mr_result(ibv_reg_mr(pd, m + pg, pg, 0)));
	printf("reg_mr read-only page, read access: %s\n", mr_result(ibv_reg_mr(pd, m + 2 * pg, pg, 0)));
	printf("reg_mr read-only page, local write: %s\n",
	       mr_result(ibv_reg_mr(pd, m + 2 * pg, pg, IBV_ACCESS_LOCAL_WRITE)));
	printf("reg_mr no-access page: %s\n", mr_result(ibv_reg_mr(pd, m + 3 * pg, pg, 0)));
	printf("reg_mr_iova2 page offsets differ: %s\n",
	       mr_result(ibv_reg_mr_iova2(pd, m + 8, 64, 0x100000000ull, IBV_ACCESS_LOCAL_WRITE)));
	mr = ibv_reg_mr(pd, m + 2 * pg, pg, 0);
	CHECK(mr, "ibv_reg_mr read-only");
	errno = 0;
	ret = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	printf("rereg_mr read-only page to local write: %d errno %s\n", ret,
	       errno == EFAULT ? "EFAULT" : err_name(errno));
	CHECK(!ibv_dereg_mr(mr), "dereg");
	munmap(m, 4 * pg);
}

static struct ibv_cq_ex *cq_ex(struct ibv_context *ctx, uint64_t wc_flags, uint32_t comp_mask,
			       struct ibv_pd *pd)
{
	struct ibv_cq_init_attr_ex a = {.cqe = 64, .wc_flags = wc_flags, .comp_mask = comp_mask,
					.parent_domain = pd};

	errno = 0;
	return ibv_create_cq_ex(ctx, &a);
}

static struct ibv_qp *qp_ex(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *scq,
			    struct ibv_cq_ex *rcq, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(scq), .recv_cq = ibv_cq_ex_to_cq(rcq),
		.cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = 64},
		.qp_type = IBV_QPT_RC, .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd, .send_ops_flags = ops,
	};

	errno = 0;
	return ibv_create_qp_ex(ctx, &a);
}

static const char *wc_op(enum ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: return "?";
	}
}

/* Polls one completion from CQ (start_poll, or next_poll when STARTED), waiting up to 10 s. */
static int poll_one(struct ibv_cq_ex *cq, int started)
{
	struct ibv_poll_cq_attr pa = {0};
	double end = now_s() + 10;
	int ret;

	for (;;) {
		ret = started ? ibv_next_poll(cq) : ibv_start_poll(cq, &pa);
		if (ret != ENOENT)
			return ret;
		if (started) {		/* next_poll found nothing: close and start over */
			ibv_end_poll(cq);
			started = 0;
		}
		CHECK(now_s() < end, "no completion within 10 s");
	}
}

/* Three signaled writes complete into a CQ of two entries nobody polls.  Returns whether the
 * context reported IBV_EVENT_CQ_ERR for it (within 300 ms of the last write landing). */
static int overrun_reported(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *rcq,
			    int ignore, struct ibv_mr *src_mr, struct ibv_mr *dst_mr, uint64_t iova)
{
	struct ibv_cq_init_attr_ex ca = {.cqe = 1, .wc_flags = IBV_WC_STANDARD_FLAGS,
					 .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					 .flags = ignore ? IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN : 0};
	struct ibv_cq_ex *tiny = ibv_create_cq_ex(ctx, &ca);
	struct ibv_qp *c, *d;
	struct ibv_qp_ex *cx;
	struct peer_info ic = {0}, id = {0};
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	uint64_t *vals = (uint64_t *)((uint8_t *)src_mr->addr + 6000), marker = 500 + ignore;
	volatile uint64_t *landed = (volatile uint64_t *)((uint8_t *)dst_mr->addr + 3000);
	double end = now_s() + 10;
	int reported = 0;

	CHECK(tiny && tiny->cqe == 1, "tiny cq: %s", strerror(errno));
	c = qp_ex(ctx, pd, tiny, rcq, IBV_QP_EX_WITH_RDMA_WRITE);
	d = qp_ex(ctx, pd, tiny, rcq, IBV_QP_EX_WITH_RDMA_WRITE);
	CHECK(c && d, "qp");
	cx = ibv_qp_to_qp_ex(c);
	fill_local_info(ctx, c, &ic);
	fill_local_info(ctx, d, &id);
	connect_rc(c, &ic, &id, 0);
	connect_rc(d, &id, &ic, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	ibv_wr_start(cx);
	for (int i = 0; i < 3; i++) {
		vals[i] = i < 2 ? (uint64_t)i : marker;
		cx->wr_id = 10 + i;
		cx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(cx, dst_mr->rkey, iova + 3000);
		ibv_wr_set_sge(cx, src_mr->lkey, (uintptr_t)&vals[i], 8);
	}
	CHECK(!ibv_wr_complete(cx), "wr_complete");
	while (*landed != marker)
		CHECK(now_s() < end, "writes did not land");
	if (poll(&pfd, 1, 300) == 1) {
		struct ibv_async_event ev;

		CHECK(!ibv_get_async_event(ctx, &ev), "ibv_get_async_event");
		reported = ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == ibv_cq_ex_to_cq(tiny);
		ibv_ack_async_event(&ev);
	}
	CHECK(!ibv_destroy_qp(c) && !ibv_destroy_qp(d) && !ibv_destroy_cq(ibv_cq_ex_to_cq(tiny)),
	      "destroy");
	return reported;
}

static void data_path(struct ibv_context *ctx, struct ibv_pd *pd)
{
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			     IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ |
			     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_IMM |
			     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
	const uint64_t flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	const uint64_t iova = 0x100000000ull;	/* the target region's address as the peer sees it */
	struct ibv_cq_ex *scq, *rcq, *bad;
	struct ibv_qp *a, *b, *bad_qp;
	struct ibv_qp_ex *ax;
	struct ibv_mr *src_mr, *dst_mr, *recv_mr;
	struct peer_info ia = {0}, ib = {0};
	uint8_t *src, *dst, *recv;
	uint64_t last_ts = 0;
	int ret, ts_ok = 1, wall_ok = 1;

	bad = cq_ex(ctx, flags | (1ull << 20), 0, NULL);
	printf("create_cq_ex unknown wc flag: %s errno %s\n", bad ? "cq" : "NULL", err_name(errno));
	bad = cq_ex(ctx, flags, IBV_CQ_INIT_ATTR_MASK_PD, pd);
	printf("create_cq_ex ordinary pd as parent domain: %s errno %s\n", bad ? "cq" : "NULL",
	       err_name(errno));
	bad = cq_ex(ctx, flags | IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG, 0, NULL);
	printf("create_cq_ex cvlan|flow_tag: %s\n", bad ? "cq" : "NULL");
	if (bad)
		ibv_destroy_cq(ibv_cq_ex_to_cq(bad));

	scq = cq_ex(ctx, flags, 0, NULL);
	rcq = cq_ex(ctx, flags, 0, NULL);
	CHECK(scq && rcq, "ibv_create_cq_ex: %s", strerror(errno));
	bad_qp = qp_ex(ctx, pd, scq, rcq, IBV_QP_EX_WITH_TSO);
	printf("create_qp_ex send_ops TSO on RC: %s errno %s\n", bad_qp ? "qp" : "NULL", err_name(errno));
	a = qp_ex(ctx, pd, scq, rcq, ops);
	b = qp_ex(ctx, pd, scq, rcq, ops);
	CHECK(a && b, "ibv_create_qp_ex: %s", strerror(errno));
	ax = ibv_qp_to_qp_ex(a);
	CHECK(ax, "ibv_qp_to_qp_ex");

	src = calloc(1, 8192);
	CHECK(!posix_memalign((void **)&dst, 4096, 8192), "posix_memalign");	/* iova's page offset */
	memset(dst, 0, 8192);
	recv = calloc(1, 4096);
	for (int i = 0; i < 4096; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	src_mr = ibv_reg_mr(pd, src, 8192, IBV_ACCESS_LOCAL_WRITE);
	dst_mr = ibv_reg_mr_iova2(pd, dst, 8192, iova, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	recv_mr = ibv_reg_mr(pd, recv, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(src_mr && dst_mr && recv_mr, "ibv_reg_mr: %s", strerror(errno));
	printf("reg_mr_iova2: addr_is_buffer %d\n", dst_mr->addr == dst);

	fill_local_info(ctx, a, &ia);
	fill_local_info(ctx, b, &ib);
	connect_rc(a, &ia, &ib, 0);
	connect_rc(b, &ib, &ia, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);

	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)recv + 2048 * i, .length = 2048,
				      .lkey = recv_mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1}, *bwr;

		CHECK(!ibv_post_recv(b, &wr, &bwr), "ibv_post_recv");
	}

	/* A's QP writes 4096 bytes at iova + 4096, writes 16 with an immediate, sends 32 inline,
	 * then (below) reads the 4096 back into src + 4096 and adds 5 to the counter at iova. */
	memcpy(dst, &(uint64_t){37}, 8);
	ibv_wr_start(ax);
	ax->wr_id = 1;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(ax, dst_mr->rkey, iova + 4096);
	ibv_wr_set_sge(ax, src_mr->lkey, (uintptr_t)src, 4096);
	ax->wr_id = 2;
	ibv_wr_rdma_write_imm(ax, dst_mr->rkey, iova + 64, htobe32(0xabcdef));
	ibv_wr_set_sge(ax, src_mr->lkey, (uintptr_t)src, 16);
	ax->wr_id = 3;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, src + 100, 32);
	ret = ibv_wr_complete(ax);
	printf("wr_complete: %s\n", err_name(ret));

	/* the send CQ and the receive CQ polled interleaved: each keeps its own current CQE
	 * (three send completions, two receive completions: the plain WRITE consumes none) */
	for (int i = 0; i < 2; i++) {
		CHECK(!poll_one(scq, 0), "send completion");
		CHECK(!poll_one(rcq, 0), "receive completion");
		printf("send cqe: wr_id %llu %s status %d qp_ok %d | recv cqe: wr_id %llu %s status %d "
		       "len %u imm %s\n",
		       (unsigned long long)scq->wr_id, wc_op(ibv_wc_read_opcode(scq)), scq->status,
		       ibv_wc_read_qp_num(scq) == a->qp_num, (unsigned long long)rcq->wr_id,
		       wc_op(ibv_wc_read_opcode(rcq)), rcq->status, ibv_wc_read_byte_len(rcq),
		       (ibv_wc_read_wc_flags(rcq) & IBV_WC_WITH_IMM) ?
			       (be32toh(ibv_wc_read_imm_data(rcq)) == 0xabcdef ? "abcdef" : "wrong") : "-");
		if (ibv_wc_read_completion_ts(scq) < last_ts || !ibv_wc_read_completion_ts(scq))
			ts_ok = 0;
		last_ts = ibv_wc_read_completion_ts(scq);
		{	/* real time, within a second of now */
			struct timespec rt;
			int64_t d;

			clock_gettime(CLOCK_REALTIME, &rt);
			d = (int64_t)(ibv_wc_read_completion_wallclock_ns(scq) -
				      ((uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec));
			wall_ok &= d > -1000000000ll && d <= 0;
		}
		ibv_end_poll(scq);
		ibv_end_poll(rcq);
	}
	CHECK(!poll_one(scq, 0), "third send completion");
	printf("send cqe: wr_id %llu %s status %d\n", (unsigned long long)scq->wr_id,
	       wc_op(ibv_wc_read_opcode(scq)), scq->status);
	ibv_end_poll(scq);
	printf("timestamps increase: %d; wall-clock near real time: %d\n", ts_ok, wall_ok);
	printf("write landed at iova+4096: %d; imm write at iova+64: %d; send payload: %d\n",
	       !memcmp(dst + 4096, src, 4096), !memcmp(dst + 64, src, 16),
	       !memcmp(recv + 2048, src + 100, 32));

	ibv_wr_start(ax);
	ax->wr_id = 4;
	ax->wr_flags = 0;			/* unsignaled */
	ibv_wr_rdma_read(ax, dst_mr->rkey, iova + 4096);
	ibv_wr_set_sge(ax, src_mr->lkey, (uintptr_t)src + 4096, 4096);
	ax->wr_id = 5;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(ax, dst_mr->rkey, iova, 5);
	ibv_wr_set_sge(ax, recv_mr->lkey, (uintptr_t)recv + 4000, 8);
	CHECK(!ibv_wr_complete(ax), "wr_complete");
	CHECK(!poll_one(scq, 0), "atomic completion");
	printf("send cqe: wr_id %llu %s status %d len %u\n", (unsigned long long)scq->wr_id,
	       wc_op(ibv_wc_read_opcode(scq)), scq->status, ibv_wc_read_byte_len(scq));
	printf("next_poll: %s\n", ibv_next_poll(scq) == ENOENT ? "ENOENT" : "more");
	ibv_end_poll(scq);
	printf("read back: %d; fetch_add returned %llu, counter %llu\n",
	       !memcmp(src + 4096, src, 4096), (unsigned long long)*(uint64_t *)(recv + 4000),
	       (unsigned long long)*(uint64_t *)dst);

	ibv_wr_start(ax);
	ibv_wr_rdma_write(ax, dst_mr->rkey, iova);
	ibv_wr_abort(ax);
	printf("wr_abort: nothing posted %d\n", ({
		struct ibv_poll_cq_attr pa = {0};
		int r = ibv_start_poll(scq, &pa);
		if (!r)
			ibv_end_poll(scq);
		r == ENOENT;
	}));

	/* lists in one batch: a SEND_WITH_IMM gathered from two entries, a WRITE of two inline
	 * pieces, a compare-swap; only the last is signaled */
	{
		struct ibv_sge sl[2] = {{(uintptr_t)src + 200, 10, src_mr->lkey},
					{(uintptr_t)src + 300, 6, src_mr->lkey}};
		struct ibv_data_buf db[2] = {{src + 400, 5}, {src + 500, 7}};
		struct ibv_sge rs = {.addr = (uintptr_t)recv + 3000, .length = 64, .lkey = recv_mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 102, .sg_list = &rs, .num_sge = 1}, *bwr;
		uint8_t want[16];

		CHECK(!ibv_post_recv(b, &rwr, &bwr), "ibv_post_recv");
		ibv_wr_start(ax);
		ax->wr_id = 6;
		ax->wr_flags = 0;
		ibv_wr_send_imm(ax, htobe32(77));
		ibv_wr_set_sge_list(ax, 2, sl);
		ax->wr_id = 7;
		ibv_wr_rdma_write(ax, dst_mr->rkey, iova + 2000);
		ibv_wr_set_inline_data_list(ax, 2, db);
		ax->wr_id = 8;
		ax->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_atomic_cmp_swp(ax, dst_mr->rkey, iova, 42, 7);
		ibv_wr_set_sge(ax, recv_mr->lkey, (uintptr_t)recv + 4008, 8);
		CHECK(!ibv_wr_complete(ax), "wr_complete");
		CHECK(!poll_one(scq, 0), "compare-swap completion");
		printf("send cqe: wr_id %llu %s status %d\n", (unsigned long long)scq->wr_id,
		       wc_op(ibv_wc_read_opcode(scq)), scq->status);
		ibv_end_poll(scq);
		CHECK(!poll_one(rcq, 0), "receive completion");
		printf("recv cqe: wr_id %llu %s len %u imm %u\n", (unsigned long long)rcq->wr_id,
		       wc_op(ibv_wc_read_opcode(rcq)), ibv_wc_read_byte_len(rcq),
		       be32toh(ibv_wc_read_imm_data(rcq)));
		ibv_end_poll(rcq);
		memcpy(want, src + 200, 10);
		memcpy(want + 10, src + 300, 6);
		printf("gathered send: %d; inline write list: %d; cmp_swp returned %llu, counter %llu\n",
		       !memcmp(recv + 3000, want, 16),
		       !memcmp(dst + 2000, src + 400, 5) && !memcmp(dst + 2005, src + 500, 7),
		       (unsigned long long)*(uint64_t *)(recv + 4008), (unsigned long long)*(uint64_t *)dst);
	}

	ret = overrun_reported(ctx, pd, rcq, 0, src_mr, dst_mr, iova);
	printf("CQ overrun reported: %d; with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: %d\n", ret,
	       overrun_reported(ctx, pd, rcq, 1, src_mr, dst_mr, iova));

	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy qp");
	CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(scq)) && !ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)), "destroy cq");
	CHECK(!ibv_dereg_mr(src_mr) && !ibv_dereg_mr(dst_mr) && !ibv_dereg_mr(recv_mr), "dereg");
}

/* As NCCL loads the libraries: the development names through the search path, RTLD_LOCAL,
 * every symbol by dlvsym with the version it was built against. */
static void nccl_style_load(void)
{
	void *vb = dlopen("libibverbs.so", RTLD_NOW), *m5 = dlopen("libmlx5.so", RTLD_NOW);
	struct ibv_device **(*get_list)(int *);
	const char *(*get_name)(struct ibv_device *);
	bool (*is_supported)(struct ibv_device *);
	struct ibv_device **list;
	Dl_info vi = {0}, mi = {0};
	int n = 0;

	CHECK(vb && m5, "dlopen: %s", dlerror());
	get_list = dlvsym(vb, "ibv_get_device_list", "IBVERBS_1.1");
	get_name = dlvsym(vb, "ibv_get_device_name", "IBVERBS_1.1");
	is_supported = dlvsym(m5, "mlx5dv_is_supported", "MLX5_1.8");
	CHECK(get_list && get_name && is_supported, "dlvsym");
	dladdr((void *)get_list, &vi);
	dladdr((void *)is_supported, &mi);
	list = get_list(&n);
	printf("dlopen libibverbs.so: emulated %d, %d device %s; libmlx5.so: emulated %d, "
	       "mlx5dv_is_supported %d\n", vi.dli_fname && strstr(vi.dli_fname, "/simnic/") != NULL,
	       n, n ? get_name(list[0]) : "-", mi.dli_fname && strstr(mi.dli_fname, "/simnic/") != NULL,
	       n ? (int)is_supported(list[0]) : -1);
}

int main(void)
{
	struct ibv_context *ctx = open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);

	CHECK(pd, "ibv_alloc_pd");
	setvbuf(stdout, NULL, _IOLBF, 0);
	nccl_style_load();
	queries(ctx);
	dmabuf(pd);
	registration(pd);
	data_path(ctx, pd);
	CHECK(!ibv_dealloc_pd(pd), "dealloc pd");
	CHECK(!ibv_close_device(ctx), "close");
	return 0;
}
