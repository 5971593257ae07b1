/* Memory regions on CUDA device memory, as NVSHMEM's IBRC registers them (ibv_reg_mr on the
 * cuMemAlloc'ed address), between two processes.
 *
 *   gpu_mr -p PORT          server: a 1 MiB device buffer, registered for remote access
 *   gpu_mr -p PORT HOST     client: its own 1 MiB device buffer; WRITE, READ, SEND, FETCH_ADD
 *
 * Both sides fill and check their buffers only with cuMemcpyHtoD / cuMemcpyDtoH, so the bytes
 * the NIC moved are the device's.  The CUDA driver is opened with dlopen: the test double in
 * CI, the real driver where there is one.  Exit status 0 only when every byte matched. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "common.h"

#define BUF (1u << 20)
#define CHUNK (256u << 10)
#define WRITE_OFF 0			/* client [0, CHUNK) -> server [0, CHUNK) */
#define READ_SRC (512u << 10)		/* server [512K, 768K) -> client [256K, 512K) */
#define READ_DST CHUNK
#define RECV_OFF (768u << 10)		/* the server's receive buffer */
#define SEND_LEN 3000u
#define COUNTER_OFF (BUF - 8)		/* the server's counter, fetched-and-added */
#define RESULT_OFF (BUF - 64)		/* where the client's fetch-add result lands */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static struct {
	CUresult (*init)(unsigned);
	CUresult (*device_get)(int *, int);
	CUresult (*primary_retain)(void **, int);
	CUresult (*set_current)(void *);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*free)(CUdeviceptr);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
} cu;

#define CU(call) CHECK((call) == 0, "%s failed", #call)

static CUdeviceptr cuda_buffer(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	void *ctx;
	CUdeviceptr p;
	int dev;

	CHECK(h, "libcuda.so.1: %s", dlerror());
	cu.init = dlsym(h, "cuInit");
	cu.device_get = dlsym(h, "cuDeviceGet");
	cu.primary_retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	cu.set_current = dlsym(h, "cuCtxSetCurrent");
	cu.alloc = dlsym(h, "cuMemAlloc_v2");
	cu.free = dlsym(h, "cuMemFree_v2");
	cu.htod = dlsym(h, "cuMemcpyHtoD_v2");
	cu.dtoh = dlsym(h, "cuMemcpyDtoH_v2");
	CHECK(cu.init && cu.device_get && cu.primary_retain && cu.set_current && cu.alloc &&
	      cu.free && cu.htod && cu.dtoh, "CUDA driver entry points missing");
	CU(cu.init(0));
	CU(cu.device_get(&dev, 0));
	CU(cu.primary_retain(&ctx, dev));
	CU(cu.set_current(ctx));
	CU(cu.alloc(&p, BUF));
	return p;
}

static void fill(CUdeviceptr dst, size_t len, uint32_t seed)
{
	uint8_t *b = malloc(len);

	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)((i * 2654435761u + seed) >> 9);
	CU(cu.htod(dst, b, len));
	free(b);
}

/* Compares device bytes at SRC with the pattern of SEED. */
static int matches(CUdeviceptr src, size_t len, uint32_t seed)
{
	uint8_t *b = malloc(len);
	int ok = 1;

	CU(cu.dtoh(b, src, len));
	for (size_t i = 0; i < len && ok; i++)
		ok = b[i] == (uint8_t)((i * 2654435761u + seed) >> 9);
	free(b);
	return ok;
}

static uint64_t load64(CUdeviceptr src)
{
	uint64_t v;

	CU(cu.dtoh(&v, src, 8));
	return v;
}

int main(int argc, char **argv)
{
	const unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_qp_init_attr ia = {
		.cap = {.max_send_wr = 16, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct peer_info me = {0}, peer;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_wc wc[4];
	const char *host = NULL;
	CUdeviceptr buf;
	int port = 18600, opt, fd;

	while ((opt = getopt(argc, argv, "p:")) != -1)
		port = atoi(optarg);
	if (optind < argc)
		host = argv[optind];
	setvbuf(stdout, NULL, _IOLBF, 0);

	buf = cuda_buffer();			/* the driver is loaded before any registration */
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(pd && cq, "pd/cq");
	ia.send_cq = ia.recv_cq = cq;
	qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));
	mr = ibv_reg_mr(pd, (void *)(uintptr_t)buf, BUF, access);
	CHECK(mr, "ibv_reg_mr on device memory: %s", strerror(errno));
	printf("%s: ibv_reg_mr on cuMemAlloc'ed memory: lkey set %d\n", host ? "client" : "server",
	       mr->lkey != 0);

	fd = tcp_connect_or_accept(host, port);
	fill_local_info(ctx, qp, &me);
	me.rkey = mr->rkey;
	me.addr = buf;
	me.len = BUF;
	exchange(fd, &me, &peer);
	connect_rc(qp, &me, &peer, access);

	if (!host) {
		struct ibv_sge sge = {.addr = buf + RECV_OFF, .length = 4096, .lkey = mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bad;
		uint64_t counter = 1000;

		fill(buf + READ_SRC, CHUNK, 2);
		CU(cu.htod(buf + COUNTER_OFF, &counter, 8));
		CHECK(!ibv_post_recv(qp, &rwr, &bad), "ibv_post_recv");
		sync_peer(fd);				/* ready: the client may start */
		poll_n(cq, wc, 1, 30);
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV, "recv: %s",
		      ibv_wc_status_str(wc[0].status));
		sync_peer(fd);				/* the client is done */
		printf("server: received %u bytes into device memory: %s\n", wc[0].byte_len,
		       matches(buf + RECV_OFF, SEND_LEN, 1) ? "identical" : "DIFFERENT");
		printf("server: RDMA WRITE into device memory: %s\n",
		       matches(buf + WRITE_OFF, CHUNK, 1) ? "identical" : "DIFFERENT");
		printf("server: counter %llu\n", (unsigned long long)load64(buf + COUNTER_OFF));
		CHECK(matches(buf + RECV_OFF, SEND_LEN, 1) && matches(buf + WRITE_OFF, CHUNK, 1) &&
		      load64(buf + COUNTER_OFF) == 1042, "server: bytes differ");
	} else {
		struct ibv_sge s_write = {.addr = buf + WRITE_OFF, .length = CHUNK, .lkey = mr->lkey};
		struct ibv_sge s_read = {.addr = buf + READ_DST, .length = CHUNK, .lkey = mr->lkey};
		struct ibv_sge s_send = {.addr = buf + WRITE_OFF, .length = SEND_LEN, .lkey = mr->lkey};
		struct ibv_sge s_fa = {.addr = buf + RESULT_OFF, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr w[4] = {
			{.wr_id = 1, .sg_list = &s_write, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			 .send_flags = IBV_SEND_SIGNALED,
			 .wr.rdma = {.remote_addr = peer.addr + WRITE_OFF, .rkey = peer.rkey}},
			{.wr_id = 2, .sg_list = &s_read, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
			 .send_flags = IBV_SEND_SIGNALED,
			 .wr.rdma = {.remote_addr = peer.addr + READ_SRC, .rkey = peer.rkey}},
			{.wr_id = 3, .sg_list = &s_send, .num_sge = 1, .opcode = IBV_WR_SEND,
			 .send_flags = IBV_SEND_SIGNALED},
			{.wr_id = 4, .sg_list = &s_fa, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
			 .send_flags = IBV_SEND_SIGNALED,
			 .wr.atomic = {.remote_addr = peer.addr + COUNTER_OFF, .compare_add = 42,
				       .rkey = peer.rkey}},
		}, *bad;

		for (int i = 0; i < 3; i++)
			w[i].next = &w[i + 1];
		fill(buf + WRITE_OFF, CHUNK, 1);
		sync_peer(fd);
		CHECK(!ibv_post_send(qp, w, &bad), "ibv_post_send");
		poll_n(cq, wc, 4, 30);
		for (int i = 0; i < 4; i++)
			CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)i + 1,
			      "completion %d: wr_id %llu %s", i, (unsigned long long)wc[i].wr_id,
			      ibv_wc_status_str(wc[i].status));
		printf("client: 4 completions: WRITE, READ, SEND, FETCH_ADD\n");
		printf("client: RDMA READ into device memory: %s\n",
		       matches(buf + READ_DST, CHUNK, 2) ? "identical" : "DIFFERENT");
		printf("client: fetch_add returned %llu\n", (unsigned long long)load64(buf + RESULT_OFF));
		CHECK(matches(buf + READ_DST, CHUNK, 2) && load64(buf + RESULT_OFF) == 1000,
		      "client: bytes differ");
		sync_peer(fd);
	}
	close(fd);
	CHECK(!ibv_destroy_qp(qp) && !ibv_dereg_mr(mr) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd),
	      "teardown");
	CU(cu.free(buf));
	ibv_close_device(ctx);
	return 0;
}
