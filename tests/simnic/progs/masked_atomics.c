/* Masked (extended) atomics on the emulated NIC, WQEs written by hand into a verbs RC QP's send
 * queue (mlx5dv_init_obj) as UCX and NVSHMEM write them, between two QPs of one process.
 *
 * Good ones: 4- and 8-byte masked compare-swap and fetch-add, each result and target word
 * printed.  Bad ones, each on a fresh pair of QPs (an error moves the QP to the error state):
 * opmods the device does not perform, a local buffer of the wrong size, a misaligned target.
 * Each prints the completion's status and vendor syndrome.  One line per step;
 * tests/simnic/test_masked_atomics.py compares them.  Exit status 2 on a failed check.
 *
 *   masked_atomics        results and targets in host memory
 *   masked_atomics -g     in CUDA device memory (cuMemAlloc, filled and read with cuMemcpy*;
 *                         the driver opened with dlopen: the test double in CI) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/mlx5dv.h>

#include "common.h"

struct sq {
	struct ibv_qp *qp, *peer;
	struct ibv_cq *cq;
	uint8_t *buf;
	uint32_t cnt, pi;
	volatile __be32 *dbrec;
	volatile uint64_t *bf;
};

static struct ibv_pd *pd;
static struct ibv_context *ctx;
static uint8_t *mem;		/* [0, 64): local results; [64, 128): targets */
static struct ibv_mr *mr;
static int gpu;
static struct {
	int (*htod)(unsigned long long, const void *, size_t);
	int (*dtoh)(void *, unsigned long long, size_t);
} cu;

static void mput(uint32_t off, const void *src, size_t n)
{
	if (gpu)
		CHECK(!cu.htod((uintptr_t)mem + off, src, n), "cuMemcpyHtoD");
	else
		memcpy(mem + off, src, n);
}

static void mfill(uint32_t off, int c, size_t n)
{
	uint8_t b[4096];

	memset(b, c, n);
	mput(off, b, n);
}

/* A device buffer from the CUDA driver, in the device's primary context. */
static uint8_t *cuda_alloc(size_t n)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW), *ctx;
	int (*init)(unsigned), (*device_get)(int *, int), (*retain)(void **, int), (*set)(void *);
	int (*alloc)(unsigned long long *, size_t);
	unsigned long long p;
	int dev;

	CHECK(h, "libcuda.so.1: %s", dlerror());
	init = dlsym(h, "cuInit");
	device_get = dlsym(h, "cuDeviceGet");
	retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	set = dlsym(h, "cuCtxSetCurrent");
	alloc = dlsym(h, "cuMemAlloc_v2");
	cu.htod = dlsym(h, "cuMemcpyHtoD_v2");
	cu.dtoh = dlsym(h, "cuMemcpyDtoH_v2");
	CHECK(init && device_get && retain && set && alloc && cu.htod && cu.dtoh, "CUDA entry points");
	CHECK(!init(0) && !device_get(&dev, 0) && !retain(&ctx, dev) && !set(ctx) && !alloc(&p, n), "CUDA setup");
	return (uint8_t *)(uintptr_t)p;
}

static void pair(struct sq *s)
{
	struct ibv_qp_init_attr ia = {.cap = {.max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1,
					     .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct peer_info pa = {0}, pb = {0};
	struct ibv_port_attr port;
	struct mlx5dv_qp dq;
	struct mlx5dv_obj obj = {.qp = {.out = &dq}};
	unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		       IBV_ACCESS_REMOTE_ATOMIC;

	s->cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(s->cq, "create_cq");
	ia.send_cq = ia.recv_cq = s->cq;
	s->qp = ibv_create_qp(pd, &ia);
	s->peer = ibv_create_qp(pd, &ia);
	CHECK(s->qp && s->peer, "create_qp");
	CHECK(!ibv_query_port(ctx, 1, &port), "query_port");
	pa.qpn = s->qp->qp_num;
	pb.qpn = s->peer->qp_num;
	pa.lid = pb.lid = port.lid;
	pa.psn = 100;
	pb.psn = 200;
	connect_rc(s->qp, &pa, &pb, acc);
	connect_rc(s->peer, &pb, &pa, acc);
	obj.qp.in = s->qp;
	CHECK(!mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP), "mlx5dv_init_obj");
	s->buf = dq.sq.buf;
	s->cnt = dq.sq.wqe_cnt;
	s->dbrec = dq.dbrec;
	s->bf = dq.bf.reg;
	s->pi = 0;
}

static void unpair(struct sq *s)
{
	CHECK(!ibv_destroy_qp(s->qp) && !ibv_destroy_qp(s->peer) && !ibv_destroy_cq(s->cq), "destroy");
}

static void put_be32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static void put_be64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

/* One atomic WQE: ctrl + raddr + the operand segments OPS (NOPS bytes) + one data segment of
 * LEN bytes at local offset LOFF; target at offset TOFF of the region.  Returns the completion. */
static struct ibv_wc post(struct sq *s, uint8_t opcode, uint8_t opmod, const uint8_t *ops, uint32_t nops,
			  uint32_t loff, uint32_t len, uint32_t toff)
{
	uint8_t wqe[128] = {0};
	uint32_t ds = 2 + nops / 16 + 1, nbb = (ds * 16 + 63) / 64;
	struct mlx5_wqe_ctrl_seg *c = (void *)wqe;
	struct ibv_wc wc;
	double end = now_s() + 10;

	put_be64(wqe + 16, (uintptr_t)mem + toff);
	put_be32(wqe + 24, mr->rkey);
	memcpy(wqe + 32, ops, nops);
	put_be32(wqe + 32 + nops, len);
	put_be32(wqe + 36 + nops, mr->lkey);
	put_be64(wqe + 40 + nops, (uintptr_t)mem + loff);
	mlx5dv_set_ctrl_seg(c, (uint16_t)s->pi, opcode, opmod, s->qp->qp_num, MLX5_WQE_CTRL_CQ_UPDATE,
			    (uint8_t)ds, 0, 0);
	for (uint32_t b = 0; b < nbb; b++)
		memcpy(s->buf + ((s->pi + b) & (s->cnt - 1)) * 64, wqe + 64 * b, 64);
	s->pi += nbb;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	s->dbrec[MLX5_SND_DBR] = htobe32(s->pi & 0xffff);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(s->bf, *(uint64_t *)wqe, __ATOMIC_RELEASE);
	while (ibv_poll_cq(s->cq, 1, &wc) == 0)
		CHECK(now_s() < end, "no completion");
	return wc;
}

static uint64_t get(uint32_t off, uint32_t len)
{
	uint64_t v = 0;

	if (gpu)
		CHECK(!cu.dtoh(&v, (uintptr_t)mem + off, len), "cuMemcpyDtoH");
	else
		memcpy(&v, mem + off, len);
	return v;
}

static void good(void)
{
	struct sq s;
	uint8_t ops[32];
	struct ibv_wc wc;
	uint64_t t8 = 0x1122334455667788ull;
	uint32_t t4 = 0x7ffffffe;

	pair(&s);
	mput(64, &t8, 8);
	mput(72, &t4, 4);
	mfill(0, 0xee, 64);

	/* 4-byte masked fetch-add, fields of 16 bits: 0x7ffffffe + 0x00010003 */
	put_be32(ops, 0x00010003);
	put_be32(ops + 4, 0x80008000);
	memset(ops + 8, 0, 8);
	wc = post(&s, MLX5_OPCODE_ATOMIC_MASKED_FA, 0x08, ops, 16, 0, 4, 72);
	printf("mfadd4: status %d result %08x tail %08x target %08x\n", wc.status,
	       (uint32_t)be32toh((uint32_t)get(0, 4)), (uint32_t)get(4, 4), (uint32_t)get(72, 4));

	/* 8-byte masked compare-swap: the low byte compared (0x88, a match), the high half swapped */
	put_be64(ops, 0xaabbccdd00000000ull);
	put_be64(ops + 8, 0x88);
	put_be64(ops + 16, 0xffffffff00000000ull);
	put_be64(ops + 24, 0xff);
	wc = post(&s, MLX5_OPCODE_ATOMIC_MASKED_CS, 0x09, ops, 32, 8, 8, 64);
	printf("mcas8: status %d result %016llx target %016llx\n", wc.status,
	       (unsigned long long)get(8, 8), (unsigned long long)get(64, 8));

	/* the same, the compare now failing (low byte 0x77): nothing written */
	put_be64(ops + 8, 0x77);
	wc = post(&s, MLX5_OPCODE_ATOMIC_MASKED_CS, 0x09, ops, 32, 16, 8, 64);
	printf("mcas8 no match: status %d result %016llx target %016llx\n", wc.status,
	       (unsigned long long)get(16, 8), (unsigned long long)get(64, 8));

	/* 4-byte masked compare-swap with full masks (a plain 4-byte compare-swap) */
	put_be32(ops, 5);
	put_be32(ops + 4, 0x80000001u);	/* what the field add left */
	put_be32(ops + 8, 0xffffffff);
	put_be32(ops + 12, 0xffffffff);
	wc = post(&s, MLX5_OPCODE_ATOMIC_MASKED_CS, 0x08, ops, 16, 24, 4, 72);
	printf("mcas4: status %d result %08x target %08x\n", wc.status, (uint32_t)be32toh((uint32_t)get(24, 4)),
	       (uint32_t)get(72, 4));

	/* 8-byte masked fetch-add as an exclusive or */
	put_be64(ops, 0xff00ff00ff00ff00ull);
	put_be64(ops + 8, ~0ull);
	wc = post(&s, MLX5_OPCODE_ATOMIC_MASKED_FA, 0x09, ops, 16, 32, 8, 64);
	printf("mfadd8 xor: status %d result %016llx target %016llx\n", wc.status, (unsigned long long)get(32, 8),
	       (unsigned long long)get(64, 8));

	/* a fetch-add and IBGDA's consistency WQE behind it (DUMP 0x23: ctrl + data, fenced), one
	 * doorbell for both: the DUMP completes after the atomic, and nothing else happens */
	{
		uint8_t w[128] = {0};
		struct ibv_wc wcs[2];
		int got = 0;
		double end = now_s() + 10;

		put_be64(w + 16, (uintptr_t)mem + 64);
		put_be32(w + 24, mr->rkey);
		put_be64(w + 32, 1);
		put_be32(w + 48, 8);
		put_be32(w + 52, mr->lkey);
		put_be64(w + 56, (uintptr_t)mem + 48);
		mlx5dv_set_ctrl_seg((void *)w, (uint16_t)s.pi, MLX5_OPCODE_ATOMIC_FA, 0, s.qp->qp_num, 0, 4, 0, 0);
		put_be32(w + 64 + 16, 1);
		put_be32(w + 64 + 20, mr->lkey);
		put_be64(w + 64 + 24, (uintptr_t)mem + 48);
		mlx5dv_set_ctrl_seg((void *)(w + 64), (uint16_t)(s.pi + 1), 0x23, 0, s.qp->qp_num,
				    MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_FENCE, 2, 0, 0);
		for (int b = 0; b < 2; b++)
			memcpy(s.buf + ((s.pi + b) & (s.cnt - 1)) * 64, w + 64 * b, 64);
		s.pi += 2;
		__atomic_thread_fence(__ATOMIC_RELEASE);
		s.dbrec[MLX5_SND_DBR] = htobe32(s.pi & 0xffff);
		__atomic_thread_fence(__ATOMIC_RELEASE);
		__atomic_store_n(s.bf, *(uint64_t *)(w + 64), __ATOMIC_RELEASE);
		while (got < 1) {
			got += ibv_poll_cq(s.cq, 2 - got, wcs + got);
			CHECK(now_s() < end, "no completion");
		}
		printf("fetch-add + dump: completions %d status %d result %016llx target %016llx\n", got,
		       wcs[0].status, (unsigned long long)get(48, 8), (unsigned long long)get(64, 8));
	}
	unpair(&s);
}

static void bad(const char *what, uint8_t opcode, uint8_t opmod, uint32_t nops, uint32_t len, uint32_t toff)
{
	struct sq s;
	uint8_t ops[32] = {0};
	struct ibv_wc wc;
	uint64_t before = get(80, 8);

	pair(&s);
	wc = post(&s, opcode, opmod, ops, nops, 40, len, toff);
	printf("%s: status %s vendor_err %#x target %s\n", what, ibv_wc_status_str(wc.status), wc.vendor_err,
	       get(80, 8) == before ? "untouched" : "changed");
	unpair(&s);
}

/* QUERY_HCA_CAP of the atomic capabilities (op_mod 3 << 1 | current), the fields read at their
 * mlx5_ifc byte offsets by hand: what NVSHMEM's IBGDA and UCX check. */
static void caps(void)
{
	uint8_t in[16] = {0x01, 0x00, 0, 0, 0, 0, 0x00, 0x07}, out[16 + 4096];
	int ret = mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out, sizeof(out));
	const uint8_t *cap = out + 16;

	printf("atomic caps: ret %d status %u endianness_mode %u supported_mode_1 %u operations %#x "
	       "size_qp %#x size_dc %#x\n", ret, out[0], cap[8] >> 6, (cap[8] >> 1) & 1,
	       (cap[18] << 8) | cap[19], (cap[22] << 8) | cap[23], (cap[26] << 8) | cap[27]);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;

	gpu = argc > 1 && !strcmp(argv[1], "-g");
	if (gpu)
		mem = cuda_alloc(4096);		/* the driver is loaded before any registration */
	list = ibv_get_device_list(NULL);

	setvbuf(stdout, NULL, _IOLBF, 0);
	CHECK(list && list[0], "no device");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open_device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	if (!gpu)
		mem = aligned_alloc(4096, 4096);
	CHECK(mem, "alloc");
	mfill(0, 0, 4096);
	mr = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					      IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr, "reg_mr");
	caps();
	good();
	bad("masked fa opmod 0x0a (16 bytes)", MLX5_OPCODE_ATOMIC_MASKED_FA, 0x0a, 16, 16, 80);
	bad("masked cs opmod 0x0b (32 bytes)", MLX5_OPCODE_ATOMIC_MASKED_CS, 0x0b, 32, 32, 80);
	bad("masked fa opmod 0 (no size)", MLX5_OPCODE_ATOMIC_MASKED_FA, 0x00, 16, 8, 80);
	bad("masked cs 4 bytes, local buffer of 8", MLX5_OPCODE_ATOMIC_MASKED_CS, 0x08, 16, 8, 80);
	bad("masked fa 8 bytes, target at +4", MLX5_OPCODE_ATOMIC_MASKED_FA, 0x09, 16, 8, 84);
	bad("masked fa 4 bytes, target at +2", MLX5_OPCODE_ATOMIC_MASKED_FA, 0x08, 16, 4, 82);
	CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "close");
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
