/* An RC QP built with DevX, as GPU-initiated libraries build theirs, driven by hand.
 *
 *   devx_rc [-g] [-p PORT]        server: a DevX QP, a region with a counter
 *   devx_rc [-g [-H]] [-p PORT] HOST   client: WRITE, READ and FETCH_ADD through its own SQ
 *
 * Both sides open the device with mlx5dv_open_device(DEVX), read the HCA capabilities
 * (QUERY_HCA_CAP), allocate a UAR, register user memory for the CQ ring, the work queue and
 * the doorbell records, and create the CQ and QP with PRM mailboxes (CREATE_CQ, CREATE_QP,
 * RST2INIT, INIT2RTR, RTR2RTS).  The client then writes mlx5 WQEs into its SQ, updates the
 * doorbell record and rings the UAR with the 8-byte {producer index, qpn} store NVSHMEM uses,
 * and polls CQE64s itself (owner bit, opcode, wqe_counter).  Every byte and returned value is
 * checked; exit 0 only if all match.
 *
 * With -g a side keeps everything in CUDA device memory, as a GPU-initiated library does: the
 * CQ ring, the work queue, the doorbell records and the data region come from cuMemAlloc,
 * the UAR page is mapped for the device with cuMemHostRegister (IOMEMORY first, as NVSHMEM
 * does on hardware; on the emulated NIC's ordinary memory the driver refuses that and
 * DEVICEMAP|PORTABLE is used) and rung through the pointer cuMemHostGetDevicePointer gives.
 * No kernel runs: the host writes WQEs and reads CQEs with the driver's copies, and the
 * emulated NIC moves data with them.  The driver is dlopen'ed (libcuda.so.1): the real one on
 * a GPU machine, or sigmatrace's test double (cudastub) in CI.
 *
 * With -H (with -g) the host rings, as NVSHMEM's IBGDA does with its CPU proxy
 * (NVSHMEM_IBGDA_NIC_HANDLER=cpu_host_memory): the CQ ring, the work queue and the data stay in
 * device memory, the doorbell records move to host memory, and the UAR is never handed to the
 * driver: the host stores each doorbell through uar->reg_addr itself.
 *
 * With -C a side builds its queues as NVSHMEM's IBGDA does: the CQ collapsed and ignoring
 * overrun (cqc.cc, cqc.oi: every CQE lands in entry 0, which the poller reads for the WQE
 * counter it waits for, never moving the consumer index), and the client also posts what
 * IBGDA's quiet posts: NOPs saying ds 2 with a stale second unit, and DUMPs (opcode 0x23, a
 * local read of one data segment), 100 NOPs more than the CQ has entries, and last a DUMP
 * with a bad lkey, which completes in error.  Before connecting it makes a parent domain of its
 * PD and an SRQ on it, as IBGDA does for its DCTs.
 */
#include <dlfcn.h>
#include <infiniband/mlx5dv.h>
#include <sigmatrace/mlx5_prm.h>

#include "common.h"

#define LOG_SQ 6			/* 64 basic blocks */
#define LOG_CQ 6
#define OPCODE_DUMP 0x23		/* not in mlx5dv.h */
#define REGION 65536
#define COUNTER_INIT 40

/* ---- memory of this side: host, or CUDA device memory (-g) ------------------------------------ */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static int g_gpu;
static int g_collapsed;		/* -C: the CQ as NVSHMEM's IBGDA makes it */
static int g_host_rings;	/* -H: the UAR rung by the host, doorbell records in host memory */
static const char *g_cuda_kind = "host";
static struct {
	CUresult (*init)(unsigned);
	CUresult (*device_get)(int *, int);
	CUresult (*retain)(void **, int);
	CUresult (*set_current)(void *);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*free)(CUdeviceptr);
	CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
	CUresult (*host_register)(void *, size_t, unsigned);
	CUresult (*host_unregister)(void *);
	CUresult (*host_dptr)(CUdeviceptr *, void *, unsigned);
	CUresult (*get_attr)(void *, int, CUdeviceptr);
	CUresult (*err_name)(CUresult, const char **);
} cu;

static const char *cu_err(CUresult r)
{
	const char *n = "?";

	cu.err_name(r, &n);
	return n;
}

#define CU(call)                                                                  \
	do {                                                                      \
		CUresult r_ = (call);                                             \
		CHECK(!r_, "%s: %s", #call, cu_err(r_));                          \
	} while (0)

static void cuda_open(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL), *ctx;
	int dev;

	CHECK(h, "-g needs the CUDA driver: %s", dlerror());
#define SYM(f, n) CHECK((*(void **)&cu.f = dlsym(h, n)), "libcuda.so.1 lacks %s", n)
	SYM(init, "cuInit");
	SYM(device_get, "cuDeviceGet");
	SYM(retain, "cuDevicePrimaryCtxRetain");
	SYM(set_current, "cuCtxSetCurrent");
	SYM(alloc, "cuMemAlloc_v2");
	SYM(free, "cuMemFree_v2");
	SYM(memset8, "cuMemsetD8_v2");
	SYM(htod, "cuMemcpyHtoD_v2");
	SYM(dtoh, "cuMemcpyDtoH_v2");
	SYM(host_register, "cuMemHostRegister_v2");
	SYM(host_unregister, "cuMemHostUnregister");
	SYM(host_dptr, "cuMemHostGetDevicePointer_v2");
	SYM(get_attr, "cuPointerGetAttribute");
	SYM(err_name, "cuGetErrorName");
#undef SYM
	g_cuda_kind = dlsym(h, "sigmatrace_cudastub") ? "cudastub" : "driver";
	CU(cu.init(0));
	CU(cu.device_get(&dev, 0));
	CU(cu.retain(&ctx, dev));
	CU(cu.set_current(ctx));
}

static void *dmem_alloc(size_t n)
{
	CUdeviceptr p;
	unsigned type = 0;
	void *h;

	if (!g_gpu) {
		h = aligned_alloc(4096, n);
		CHECK(h, "out of memory");
		memset(h, 0, n);
		return h;
	}
	CU(cu.alloc(&p, n));
	CU(cu.memset8(p, 0, n));
	CU(cu.get_attr(&type, 2 /* MEMORY_TYPE */, p));
	CHECK(type == 2 /* DEVICE */, "cuMemAlloc'ed memory has type %u", type);
	return (void *)(uintptr_t)p;
}

static void dmem_free(void *p)
{
	if (g_gpu)
		CU(cu.free((CUdeviceptr)(uintptr_t)p));
	else
		free(p);
}

/* writes into / reads from this side's memory */
static void dmem_put(void *dst, const void *src, size_t n)
{
	if (g_gpu)
		CU(cu.htod((CUdeviceptr)(uintptr_t)dst, src, n));
	else
		memcpy(dst, src, n);
}

static void dmem_get(void *dst, const void *src, size_t n)
{
	if (g_gpu)
		CU(cu.dtoh(dst, (CUdeviceptr)(uintptr_t)src, n));
	else
		memcpy(dst, src, n);
}

struct devx_qp {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint32_t pdn;
	struct mlx5dv_devx_uar *uar;
	uint64_t *db_reg;		/* the doorbell register as this side's "device" sees it */
	uint8_t *cq_buf, *wq_buf, *dbr;
	struct mlx5dv_devx_umem *cq_umem, *wq_umem, *dbr_umem;
	struct mlx5dv_devx_obj *cq, *qp;
	uint32_t cqn, qpn;
	uint32_t pi, ci;
};

static void cmd_check(int ret, const void *out, const char *what)
{
	CHECK(!ret, "%s: %s (status %#x syndrome %#x)", what, strerror(ret), prm_get(out, PRM_OUT_STATUS),
	      prm_get(out, PRM_OUT_SYNDROME));
}

static void query_caps(struct ibv_context *ctx)
{
	uint8_t in[16] = {0}, *out = calloc(1, PRM_HCA_CAP_OUT_SIZE);

	prm_set(in, PRM_IN_OPCODE, PRM_CMD_QUERY_HCA_CAP);
	prm_set(in, PRM_IN_OP_MOD, PRM_CAP_TYPE_GENERAL << 1 | 1);
	cmd_check(mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out, PRM_HCA_CAP_OUT_SIZE), out, "QUERY_HCA_CAP");
	printf("caps: port_type=%u log_bf_reg_size=%u cqe_version=%u rc=%u log_max_qp_sz=%u\n",
	       prm_get(out, PRM_CAP_PORT_TYPE), prm_get(out, PRM_CAP_LOG_BF_REG_SIZE),
	       prm_get(out, PRM_CAP_CQE_VERSION), prm_get(out, PRM_CAP_RC), prm_get(out, PRM_CAP_LOG_MAX_QP_SZ));
	free(out);
}

static void build(struct devx_qp *d)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct mlx5dv_context_attr ca = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};
	struct mlx5dv_pd dvpd;
	struct mlx5dv_obj obj = {.pd = {.out = &dvpd}};
	uint8_t in[PRM_CREATE_QP_IN_BYTES], out[PRM_QUERY_QP_OUT_BYTES];
	uint32_t eqn;

	CHECK(list && list[0] && mlx5dv_is_supported(list[0]), "no mlx5 device");
	d->ctx = mlx5dv_open_device(list[0], &ca);
	CHECK(d->ctx, "mlx5dv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	query_caps(d->ctx);
	d->pd = ibv_alloc_pd(d->ctx);
	obj.pd.in = d->pd;
	CHECK(d->pd && !mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD), "pd");
	d->pdn = dvpd.pdn;
	d->uar = mlx5dv_devx_alloc_uar(d->ctx, MLX5DV_UAR_ALLOC_TYPE_NC);
	CHECK(d->uar, "mlx5dv_devx_alloc_uar: %s", strerror(errno));
	CHECK((uint8_t *)d->uar->reg_addr == (uint8_t *)d->uar->base_addr + 0x800, "reg_addr");

	d->db_reg = d->uar->reg_addr;
	if (g_gpu && g_host_rings) {
		printf("cuda: %s; UAR rung by the host\n", g_cuda_kind);
	} else if (g_gpu) {
		/* NVSHMEM maps the UAR with IOMEMORY; the emulated UAR is ordinary memory */
		CUresult r = cu.host_register(d->uar->base_addr, 4096, 0x1 | 0x2 | 0x4);
		CUdeviceptr dp;

		if (r) {
			printf("cuda: %s; UAR register IOMEMORY|DEVICEMAP|PORTABLE: %s\n", g_cuda_kind, cu_err(r));
			CU(cu.host_register(d->uar->base_addr, 4096, 0x1 | 0x2));
		} else {
			printf("cuda: %s; UAR register IOMEMORY|DEVICEMAP|PORTABLE: accepted\n", g_cuda_kind);
		}
		CU(cu.host_dptr(&dp, d->uar->reg_addr, 0));
		printf("UAR device pointer %s the host address\n",
		       dp == (uintptr_t)d->uar->reg_addr ? "equals" : "differs from");
		d->db_reg = (uint64_t *)(uintptr_t)dp;
	}

	d->cq_buf = dmem_alloc(64u << LOG_CQ);
	d->wq_buf = dmem_alloc(64u << LOG_SQ);
	if (g_host_rings) {		/* host memory: written by the host, read by the NIC */
		d->dbr = aligned_alloc(4096, 4096);
		CHECK(d->dbr, "out of memory");
		memset(d->dbr, 0, 4096);
	} else {
		d->dbr = dmem_alloc(4096);
	}
	{
		uint8_t *init = calloc(1, 64u << LOG_CQ);

		for (int i = 0; i < 1 << LOG_CQ; i++)	/* invalid, hardware-owned for the first lap */
			((struct mlx5_cqe64 *)(init + i * 64))->op_own = MLX5_CQE_INVALID << 4;
		dmem_put(d->cq_buf, init, 64u << LOG_CQ);
		free(init);
	}
	d->cq_umem = mlx5dv_devx_umem_reg(d->ctx, d->cq_buf, 64u << LOG_CQ, IBV_ACCESS_LOCAL_WRITE);
	d->wq_umem = mlx5dv_devx_umem_reg(d->ctx, d->wq_buf, 64u << LOG_SQ, IBV_ACCESS_LOCAL_WRITE);
	d->dbr_umem = mlx5dv_devx_umem_reg(d->ctx, d->dbr, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(d->cq_umem && d->wq_umem && d->dbr_umem, "umem_reg: %s", strerror(errno));
	CHECK(!mlx5dv_devx_query_eqn(d->ctx, 0, &eqn), "query_eqn");

	memset(in, 0, sizeof(in));
	prm_set(in, PRM_IN_OPCODE, PRM_CMD_CREATE_CQ);
	prm_set(in, PRM_CQ_IN_LOG_CQ_SIZE, LOG_CQ);
	prm_set(in, PRM_CQ_IN_CC, g_collapsed);
	prm_set(in, PRM_CQ_IN_OI, g_collapsed);
	prm_set(in, PRM_CQ_IN_UAR_PAGE, d->uar->page_id);
	prm_set(in, PRM_CQ_IN_C_EQN, eqn);
	prm_set(in, PRM_CQ_IN_DBR_UMEM_VALID, 1);
	prm_set(in, PRM_CQ_IN_DBR_UMEM_ID, d->dbr_umem->umem_id);
	prm_set64(in, PRM_CQ_IN_DBR_ADDR, 0);
	prm_set(in, PRM_CQ_IN_CQ_UMEM_VALID, 1);
	prm_set(in, PRM_CQ_IN_CQ_UMEM_ID, d->cq_umem->umem_id);
	prm_set64(in, PRM_CQ_IN_CQ_UMEM_OFFSET, 0);
	d->cq = mlx5dv_devx_obj_create(d->ctx, in, PRM_CREATE_CQ_IN_BYTES, out, PRM_CMD_OUT_BYTES);
	CHECK(d->cq, "CREATE_CQ: %s (status %#x)", strerror(errno), prm_get(out, PRM_OUT_STATUS));
	d->cqn = prm_get(out, PRM_CQ_OUT_CQN);

	memset(in, 0, sizeof(in));
	prm_set(in, PRM_IN_OPCODE, PRM_CMD_CREATE_QP);
	prm_set(in, PRM_QPC_ST, PRM_QP_ST_RC);
	prm_set(in, PRM_QPC_PM_STATE, 3);	/* migrated */
	prm_set(in, PRM_QPC_PD, d->pdn);
	prm_set(in, PRM_QPC_LOG_SQ_SIZE, LOG_SQ);
	prm_set(in, PRM_QPC_RQ_TYPE, PRM_RQ_ZERO_LEN);
	prm_set(in, PRM_QPC_UAR_PAGE, d->uar->page_id);
	prm_set(in, PRM_QPC_CQN_SND, d->cqn);
	prm_set(in, PRM_QPC_CQN_RCV, d->cqn);
	prm_set(in, PRM_QPC_DBR_UMEM_VALID, 1);
	prm_set(in, PRM_QPC_DBR_UMEM_ID, d->dbr_umem->umem_id);
	prm_set64(in, PRM_QPC_DBR_ADDR, 64);
	prm_set(in, PRM_QP_IN_WQ_UMEM_VALID, 1);
	prm_set(in, PRM_QP_IN_WQ_UMEM_ID, d->wq_umem->umem_id);
	prm_set64(in, PRM_QP_IN_WQ_UMEM_OFFSET, 0);
	d->qp = mlx5dv_devx_obj_create(d->ctx, in, PRM_CREATE_QP_IN_BYTES, out, PRM_CMD_OUT_BYTES);
	CHECK(d->qp, "CREATE_QP: %s (status %#x)", strerror(errno), prm_get(out, PRM_OUT_STATUS));
	d->qpn = prm_get(out, PRM_QP_OUT_QPN);

	memset(in, 0, sizeof(in));
	prm_set(in, PRM_IN_OPCODE, PRM_CMD_RST2INIT_QP);
	prm_set(in, PRM_QP_IN_QPN, d->qpn);
	prm_set(in, PRM_QPC_PM_STATE, 3);
	prm_set(in, PRM_QPC_PAP_VHCA_PORT_NUM, 1);
	prm_set(in, PRM_QPC_RRE, 1);
	prm_set(in, PRM_QPC_RWE, 1);
	prm_set(in, PRM_QPC_RAE, 1);
	cmd_check(mlx5dv_devx_obj_modify(d->qp, in, PRM_MODIFY_QP_IN_BYTES, out, PRM_CMD_OUT_BYTES), out,
		  "RST2INIT_QP");
}

static void connect_devx(struct devx_qp *d, const struct peer_info *me, const struct peer_info *peer)
{
	uint8_t in[PRM_MODIFY_QP_IN_BYTES], out[PRM_QUERY_QP_OUT_BYTES];

	memset(in, 0, sizeof(in));
	prm_set(in, PRM_IN_OPCODE, PRM_CMD_INIT2RTR_QP);
	prm_set(in, PRM_QP_IN_QPN, d->qpn);
	prm_set(in, PRM_QPC_MTU, 5);			/* 4096 */
	prm_set(in, PRM_QPC_LOG_MSG_MAX, 30);
	prm_set(in, PRM_QPC_REMOTE_QPN, peer->qpn);
	prm_set(in, PRM_QPC_PAP_RLID, peer->lid);
	prm_set(in, PRM_QPC_PAP_VHCA_PORT_NUM, 1);
	prm_set(in, PRM_QPC_NEXT_RCV_PSN, peer->psn);
	prm_set(in, PRM_QPC_LOG_RRA_MAX, 4);
	prm_set(in, PRM_QPC_MIN_RNR_NAK, 12);
	cmd_check(mlx5dv_devx_obj_modify(d->qp, in, PRM_MODIFY_QP_IN_BYTES, out, PRM_CMD_OUT_BYTES), out,
		  "INIT2RTR_QP");
	memset(in, 0, sizeof(in));
	prm_set(in, PRM_IN_OPCODE, PRM_CMD_RTR2RTS_QP);
	prm_set(in, PRM_QP_IN_QPN, d->qpn);
	prm_set(in, PRM_QPC_NEXT_SEND_PSN, me->psn);
	prm_set(in, PRM_QPC_PAP_ACK_TIMEOUT, 14);
	prm_set(in, PRM_QPC_RETRY_COUNT, 7);
	prm_set(in, PRM_QPC_RNR_RETRY, 7);
	prm_set(in, PRM_QPC_LOG_SRA_MAX, 4);
	cmd_check(mlx5dv_devx_obj_modify(d->qp, in, PRM_MODIFY_QP_IN_BYTES, out, PRM_CMD_OUT_BYTES), out,
		  "RTR2RTS_QP");
	memset(in, 0, sizeof(in));
	prm_set(in, PRM_IN_OPCODE, PRM_CMD_QUERY_QP);
	prm_set(in, PRM_QP_IN_QPN, d->qpn);
	cmd_check(mlx5dv_devx_obj_query(d->qp, in, 16, out, sizeof(out)), out, "QUERY_QP");
	CHECK(prm_get(out, PRM_QPC_STATE) == PRM_QPC_STATE_RTS, "QP state %u", prm_get(out, PRM_QPC_STATE));
	CHECK(prm_get(out, PRM_QPC_REMOTE_QPN) == peer->qpn, "remote qpn");
}

/* Stores a doorbell record's counter at byte OFF of the records: a copy into device memory, or
 * (-H) a plain store into host memory. */
static void dbr_put(struct devx_qp *d, uint32_t off, __be32 rec)
{
	if (g_host_rings)
		__atomic_store_n((__be32 *)(d->dbr + off), rec, __ATOMIC_RELEASE);
	else
		dmem_put(d->dbr + off, &rec, 4);
}

/* Writes one WQE at the producer index, then doorbell record and UAR, as NVSHMEM does. */
static void post_wqe(struct devx_qp *d, uint8_t opcode, uint64_t laddr, uint32_t len, uint32_t lkey,
		     uint64_t raddr, uint32_t rkey, uint64_t add)
{
	uint8_t wqe[64];
	struct mlx5_wqe_ctrl_seg *ctrl = (void *)wqe;
	struct mlx5_wqe_raddr_seg *r = (void *)(wqe + 16);
	struct mlx5_wqe_data_seg *ds;
	uint32_t nds = 3;
	uint64_t db;
	__be32 rec;

	memset(wqe, 0, 64);
	r->raddr = htobe64(raddr);
	r->rkey = htobe32(rkey);
	if (opcode == MLX5_OPCODE_ATOMIC_FA) {
		struct mlx5_wqe_atomic_seg *a = (void *)(wqe + 32);

		a->swap_add = htobe64(add);
		ds = (void *)(wqe + 48);
		nds = 4;
	} else {
		ds = (void *)(wqe + 32);
	}
	ds->byte_count = htobe32(len);
	ds->lkey = htobe32(lkey);
	ds->addr = htobe64(laddr);
	mlx5dv_set_ctrl_seg(ctrl, (uint16_t)d->pi, opcode, 0, d->qpn, MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)nds, 0, 0);
	dmem_put(d->wq_buf + (d->pi & ((1u << LOG_SQ) - 1)) * 64, wqe, 64);
	d->pi++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	rec = htobe32(d->pi & 0xffff);
	dbr_put(d, 64 + 4, rec);	/* send counter: second dword of the record */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	/* {be32(producer index << 8), be32(qpn << 8)}: opcode 0 and ds 0, as NVSHMEM rings */
	db = (uint64_t)htobe32(d->pi << 8) | (uint64_t)htobe32(d->qpn << 8) << 32;
	__atomic_store_n(d->db_reg, db, __ATOMIC_RELEASE);
}

/* A signaled WQE of OPCODE with DS 16-byte units: the control segment and SEG16 as its second
 * unit (a NOP's stale bytes, or a DUMP's data segment). */
static void post_raw(struct devx_qp *d, uint8_t opcode, uint8_t ds, const void *seg16)
{
	uint8_t wqe[64];
	uint64_t db;
	__be32 rec;

	memset(wqe, 0, 64);
	memcpy(wqe + 16, seg16, 16);
	mlx5dv_set_ctrl_seg((void *)wqe, (uint16_t)d->pi, opcode, 0, d->qpn, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, 0);
	dmem_put(d->wq_buf + (d->pi & ((1u << LOG_SQ) - 1)) * 64, wqe, 64);
	d->pi++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	rec = htobe32(d->pi & 0xffff);
	dbr_put(d, 64 + 4, rec);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	db = (uint64_t)htobe32(d->pi << 8) | (uint64_t)htobe32(d->qpn << 8) << 32;
	__atomic_store_n(d->db_reg, db, __ATOMIC_RELEASE);
}

/* -C: waits until the collapsed CQ's one entry holds the completion of WQE IDX (a valid
 * opcode and that WQE counter, as IBGDA polls); returns it unchecked. */
static struct mlx5_cqe64 poll_collapsed(struct devx_qp *d, uint32_t idx)
{
	struct mlx5_cqe64 copy;
	double end = now_s() + 20;

	for (;;) {
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		dmem_get(&copy, d->cq_buf, sizeof(copy));
		if ((copy.op_own >> 4) != MLX5_CQE_INVALID && be16toh(copy.wqe_counter) == (uint16_t)idx)
			return copy;
		CHECK(now_s() < end, "no CQE for WQE %u in the collapsed CQ's entry", idx);
	}
}

/* Polls our own CQ for the completion of the WQE at index IDX. */
static struct mlx5_cqe64 poll_cqe(struct devx_qp *d, uint32_t idx)
{
	struct mlx5_cqe64 *cqe = (void *)(d->cq_buf + (d->ci & ((1u << LOG_CQ) - 1)) * 64), copy;
	double end = now_s() + 20;
	__be32 rec;

	if (g_collapsed) {
		copy = poll_collapsed(d, idx);
		d->ci++;		/* counted here only: the CQ's consumer index is never written */
		goto check;
	}
	for (;;) {
		uint8_t op_own;

		if (g_gpu)
			dmem_get(&op_own, &cqe->op_own, 1);
		else
			op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
		if ((op_own >> 4) != MLX5_CQE_INVALID && (op_own & 1) == ((d->ci >> LOG_CQ) & 1))
			break;
		CHECK(now_s() < end, "no CQE for WQE %u", idx);
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);	/* the owner byte first, then the rest */
	dmem_get(&copy, cqe, sizeof(copy));
	d->ci++;
	rec = htobe32(d->ci & 0xffffff);
	dbr_put(d, 0, rec);
check:
	CHECK(mlx5dv_get_cqe_opcode(&copy) == MLX5_CQE_REQ, "CQE opcode %u (syndrome %#x)",
	      mlx5dv_get_cqe_opcode(&copy), ((struct mlx5_err_cqe *)&copy)->syndrome);
	CHECK(be16toh(copy.wqe_counter) == (uint16_t)idx, "wqe_counter %u, expected %u",
	      be16toh(copy.wqe_counter), idx);
	CHECK((be32toh(copy.sop_drop_qpn) & 0xffffff) == d->qpn, "qpn in CQE");
	return copy;
}

/* -C: what IBGDA's quiet posts, then more completions than the CQ has entries (only entry 0 is
 * ever written, and no overrun stops it), then a DUMP the device cannot read. */
static void quiet_wqes(struct devx_qp *d, uint32_t *idx, uint64_t laddr, uint32_t lkey)
{
	struct mlx5_wqe_data_seg seg = {.byte_count = htobe32(1), .lkey = htobe32(lkey), .addr = htobe64(laddr)};
	uint8_t stale[16];
	struct mlx5_cqe64 c;
	uint32_t n = 0;

	memset(stale, 0xa5, 16);	/* not a data segment: a NOP's second unit is never read */
	post_raw(d, MLX5_OPCODE_NOP, 2, stale);
	c = poll_cqe(d, (*idx)++);
	CHECK(be32toh(c.sop_drop_qpn) >> 24 == MLX5_OPCODE_NOP, "NOP's CQE names opcode %#x",
	      be32toh(c.sop_drop_qpn) >> 24);
	post_raw(d, OPCODE_DUMP, 2, &seg);
	c = poll_cqe(d, (*idx)++);
	CHECK(be32toh(c.sop_drop_qpn) >> 24 == OPCODE_DUMP, "DUMP's CQE names opcode %#x",
	      be32toh(c.sop_drop_qpn) >> 24);
	printf("nop (ds 2, stale second unit) + dump of 1 byte: completed\n");
	for (uint32_t i = 0; i < (1u << LOG_CQ) + 100; i++, n++) {
		post_raw(d, MLX5_OPCODE_NOP, 2, stale);
		poll_cqe(d, (*idx)++);
	}
	printf("collapsed CQ: %u more completions in entry 0, consumer index never written\n", n);
	seg.lkey = htobe32(lkey ^ 0x5a5a00);
	post_raw(d, OPCODE_DUMP, 2, &seg);
	c = poll_collapsed(d, (*idx)++);
	d->ci++;
	CHECK(mlx5dv_get_cqe_opcode(&c) == MLX5_CQE_REQ_ERR, "bad DUMP: CQE opcode %u", mlx5dv_get_cqe_opcode(&c));
	printf("dump with a bad lkey: error completion, syndrome %#x\n", ((struct mlx5_err_cqe *)&c)->syndrome);
}

/* -C: a parent domain of the QP's PD with an SRQ on it, as IBGDA makes its DCTs' SRQ; the PD
 * stays busy while the parent domain lives, and custom allocators are refused. */
static void parent_domain(struct devx_qp *d)
{
	struct ibv_parent_domain_init_attr pa = {.pd = d->pd};
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_pd *parent = ibv_alloc_parent_domain(d->ctx, &pa);
	struct ibv_srq *srq;
	int busy, refused;

	CHECK(parent, "ibv_alloc_parent_domain: %s", strerror(errno));
	srq = ibv_create_srq(parent, &sa);
	CHECK(srq, "ibv_create_srq on the parent domain: %s", strerror(errno));
	busy = ibv_dealloc_pd(d->pd);
	pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
	refused = ibv_alloc_parent_domain(d->ctx, &pa) == NULL ? errno : 0;
	CHECK(!ibv_destroy_srq(srq) && !ibv_dealloc_pd(parent), "destroying the SRQ and the parent domain");
	printf("parent domain: srq made on it, pd busy while it lives (%s), allocators refused (%s)\n",
	       strerror(busy), strerror(refused));
}

int main(int argc, char **argv)
{
	struct devx_qp d = {0};
	struct peer_info me = {0}, peer;
	uint8_t *region;
	struct ibv_mr *mr;
	const char *host = NULL;
	int port = 18800, opt, fd;
	uint64_t v;

	while ((opt = getopt(argc, argv, "p:gCH")) != -1) {
		if (opt == 'p')
			port = atoi(optarg);
		else if (opt == 'g')
			g_gpu = 1;
		else if (opt == 'C')
			g_collapsed = 1;
		else if (opt == 'H')
			g_host_rings = 1;
		else
			DIE("usage: devx_rc [-g [-H]] [-C] [-p PORT] [HOST]");
	}
	if (g_host_rings && !g_gpu)
		DIE("-H is for queues in device memory: use it with -g");
	if (optind < argc)
		host = argv[optind];
	setvbuf(stdout, NULL, _IOLBF, 0);
	srand48(getpid());
	if (g_gpu)
		cuda_open();
	build(&d);
	region = dmem_alloc(REGION);
	v = COUNTER_INIT;
	dmem_put(region + REGION - 8, &v, 8);
	mr = ibv_reg_mr(d.pd, region, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	{
		struct ibv_port_attr pa;

		CHECK(!ibv_query_port(d.ctx, 1, &pa), "query_port");
		me.lid = pa.lid;
	}
	if (g_collapsed)
		parent_domain(&d);
	me.qpn = d.qpn;
	me.psn = (uint32_t)lrand48() & 0xffffff;
	me.addr = (uintptr_t)region;
	me.rkey = mr->rkey;
	fd = tcp_connect_or_accept(host, port);
	exchange(fd, &me, &peer);
	connect_devx(&d, &me, &peer);
	printf("devx qp %#x connected to %#x: RTS\n", d.qpn, peer.qpn);
	sync_peer(fd);
	if (host) {
		uint8_t *src = region, *dst = region + 16384;
		uint64_t *res = (uint64_t *)(region + 32768), got[2];
		uint8_t pattern[4096], back[4096];
		struct mlx5_cqe64 c;
		uint64_t expect = COUNTER_INIT;
		uint32_t idx = 0;

		for (int i = 0; i < 4096; i++)
			pattern[i] = (uint8_t)(i * 7 + 3);
		dmem_put(src, pattern, 4096);
		post_wqe(&d, MLX5_OPCODE_RDMA_WRITE, (uintptr_t)src, 4096, mr->lkey, peer.addr + 4096, peer.rkey, 0);
		poll_cqe(&d, idx++);
		post_wqe(&d, MLX5_OPCODE_RDMA_READ, (uintptr_t)dst, 4096, mr->lkey, peer.addr + 4096, peer.rkey, 0);
		c = poll_cqe(&d, idx++);
		CHECK(be32toh(c.byte_cnt) == 4096, "READ byte_cnt %u", be32toh(c.byte_cnt));
		dmem_get(back, dst, 4096);
		CHECK(!memcmp(pattern, back, 4096), "read back differs");
		printf("write 4096 + read 4096: identical\n");
		for (uint64_t add = 1; add <= 3; add++) {
			post_wqe(&d, MLX5_OPCODE_ATOMIC_FA, (uintptr_t)&res[0], 8, mr->lkey,
				 peer.addr + REGION - 8, peer.rkey, add * 100);
			poll_cqe(&d, idx++);
			dmem_get(&got[0], &res[0], 8);
			CHECK(got[0] == expect, "fetch_add returned %llu, expected %llu", (unsigned long long)got[0],
			      (unsigned long long)expect);
			expect += add * 100;
		}
		post_wqe(&d, MLX5_OPCODE_RDMA_READ, (uintptr_t)&res[1], 8, mr->lkey, peer.addr + REGION - 8,
			 peer.rkey, 0);
		poll_cqe(&d, idx++);
		dmem_get(&got[1], &res[1], 8);
		CHECK(got[1] == expect, "counter %llu", (unsigned long long)got[1]);
		printf("fetch_add x3: returned 40, 140, 340; counter %llu\n", (unsigned long long)got[1]);
		if (g_collapsed)
			quiet_wqes(&d, &idx, (uintptr_t)src, mr->lkey);
		printf("client: %u WQEs, %u CQEs polled by hand\n", d.pi, d.ci);
	}
	sync_peer(fd);
	if (!host) {
		uint8_t back[4096];
		int same = 1;

		dmem_get(&v, region + REGION - 8, 8);
		dmem_get(back, region + 4096, 4096);
		for (int i = 0; i < 4096; i++)
			same &= back[i] == (uint8_t)(i * 7 + 3);
		CHECK(same, "bytes 4096..8191 differ from what the client wrote");
		printf("server: counter %llu, bytes 4096..8191 written\n", (unsigned long long)v);
	}
	close(fd);
	CHECK(!mlx5dv_devx_obj_destroy(d.qp) && !mlx5dv_devx_obj_destroy(d.cq), "destroy");
	CHECK(!mlx5dv_devx_umem_dereg(d.cq_umem) && !mlx5dv_devx_umem_dereg(d.wq_umem) &&
	      !mlx5dv_devx_umem_dereg(d.dbr_umem), "dereg");
	ibv_dereg_mr(mr);
	if (g_gpu) {
		if (!g_host_rings)
			CU(cu.host_unregister(d.uar->base_addr));
		dmem_free(d.cq_buf);
		dmem_free(d.wq_buf);
		if (g_host_rings)
			free(d.dbr);
		else
			dmem_free(d.dbr);
	}
	dmem_free(region);
	mlx5dv_devx_free_uar(d.uar);
	ibv_dealloc_pd(d.pd);
	ibv_close_device(d.ctx);
	return 0;
}
