/* gda_example: GPU-initiated RDMA in the manner of the "mini-gda" transport.
 *
 * The host builds everything a GPU-initiated library builds with mlx5dv devx: a UAR per QP, send
 * queues, completion queues and doorbell records in GPU memory registered as devx umems, RC QPs
 * created and connected with PRM command mailboxes, and the doorbell register mapped for the GPU
 * with cuMemHostRegister + cuMemHostGetDevicePointer.  Then one GPU thread per QP (or a CPU thread
 * standing in for it) builds WQEs, updates the doorbell record, rings the doorbell with one 8-byte
 * store and polls CQEs (gda_ops.h).  Afterwards the host verifies every byte moved and every
 * atomic result, and prints a JSON summary on stdout.
 *
 * QPs come in connected pairs (2p, 2p+1) on one device; the even QP of each pair submits (both
 * do in ping-pong).  Run with --help for the modes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include "gda_cuda.h"
#include "gda_launch.h"
#include "gda_ops.h"
#include "gda_prm.h"

/* The segment words gda_wqe.h writes, checked against rdma-core's definitions. */
_Static_assert(offsetof(struct mlx5_wqe_ctrl_seg, qpn_ds) == 4, "ctrl.qpn_ds");
_Static_assert(offsetof(struct mlx5_wqe_ctrl_seg, fm_ce_se) == 11, "ctrl.fm_ce_se");
_Static_assert(offsetof(struct mlx5_wqe_ctrl_seg, imm) == 12, "ctrl.imm");
_Static_assert(offsetof(struct mlx5_wqe_raddr_seg, rkey) == 8, "raddr.rkey");
_Static_assert(offsetof(struct mlx5_wqe_data_seg, lkey) == 4 && offsetof(struct mlx5_wqe_data_seg, addr) == 8, "data");
_Static_assert(offsetof(struct mlx5_wqe_atomic_seg, compare) == 8, "atomic.compare");
_Static_assert(offsetof(struct mlx5_cqe64, byte_cnt) == 44 && offsetof(struct mlx5_cqe64, sop_drop_qpn) == 56, "cqe");
_Static_assert(offsetof(struct mlx5_cqe64, wqe_counter) == 60 && offsetof(struct mlx5_cqe64, op_own) == 63, "cqe");
_Static_assert((int)GDA_OP_RDMA_WRITE == (int)MLX5_OPCODE_RDMA_WRITE && (int)GDA_OP_RDMA_READ == (int)MLX5_OPCODE_RDMA_READ &&
               (int)GDA_OP_ATOMIC_FA == (int)MLX5_OPCODE_ATOMIC_FA, "opcodes");
_Static_assert((int)GDA_CTRL_CQ_UPDATE == (int)MLX5_WQE_CTRL_CQ_UPDATE && (unsigned)GDA_INLINE_SEG == (unsigned)MLX5_INLINE_SEG, "flags");

/* The GPU build also maps the doorbell through the CUDA runtime (gda_kernels.cu). */
int gda_runtime_map_uar(void *page, size_t bytes, unsigned flags, void *reg, uint64_t *dptr, char *err,
                        size_t errlen) __attribute__((weak));
int gda_runtime_unmap_uar(void *page) __attribute__((weak));

/* ---- options ------------------------------------------------------------------------------ */

struct opts {
    int mode;
    uint32_t kinds;
    uint64_t n;
    uint32_t pairs;
    uint32_t batch;
    uint32_t slots;     /* send queue blocks */
    uint32_t area;      /* slots per buffer area */
    uint32_t warmup;
    uint32_t lat_kind;
    uint32_t db_style;
    int procaddress;
    int uar_flags;      /* 0 auto, 1 I/O memory, 2 DEVICEMAP|PORTABLE */
    int uar_runtime;
    int inline_data;
    int host_queues;    /* send/completion queues and records in pinned host memory */
    int fenced_dbrec;   /* a fence between the WQEs and the doorbell record too */
    uint32_t sig_every;
    double timeout_s;
    double gap_us;
    double start_delay_s; /* wait before setting anything up (to attach a tracer first) */
    double linger_s;      /* keep everything mapped this long after the run (to attach late) */
    int alternate;        /* latency mode, several pairs: their threads take turns */
    const char *setup_gate; /* set up the first pair, then wait for this file before the rest */
    const char *dev;
    const char *json;   /* write the summary here instead of stdout */
    int quiet;
    int dc;             /* --transport dc: DCIs (DevX) posting to the peers' DCTs */
    uint32_t dc_av;     /* bytes of a DCI WQE's address vector: 16 or 48 */
};

#define GDA_DC_KEY 0xdc0ffee5eedull /* every DCT's access key (what the DCIs' AVs name) */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gda_example [OPTIONS]\n"
            "GPU-initiated RDMA with mlx5dv devx queues in GPU memory (%s submitting threads).\n\n"
            "  -m, --mode MODE       ops (default): N operations of each kind, verified;\n"
            "                        latency: put+completion one at a time (p50/p99);\n"
            "                        pingpong: round trips between two submitting threads;\n"
            "                        rate: 8-byte writes as fast as the queues allow\n"
            "  -n, --iters N         operations per kind / iterations (default 1000)\n"
            "      --ops LIST        ops mode: kinds in order, of write,read,fadd,writev and the masked\n"
            "                        atomics mcas,mfadd (8 bytes), mcas4,mfadd4 (4 bytes) (default write,read,fadd)\n"
            "  -q, --qps Q           submitting QPs (each connected to a peer QP; default 1)\n"
            "  -b, --batch B         WQEs announced per doorbell (default 1)\n"
            "  -s, --slots S         send queue size in 64-byte blocks, a power of two (default 64)\n"
            "      --area A          slots per buffer area (default 16)\n"
            "  -w, --warmup W        latency / pingpong iterations not measured (default 100)\n"
            "      --op KIND         latency mode: write, read or fadd (default write)\n"
            "      --db-style STYLE  next: doorbell {next index, qpn} as GPU libraries ring it (default);\n"
            "                        last: the last WQE's control word as rdma-core rings it\n"
            "      --resolve HOW     dlsym (default) or procaddress: how CUDA driver calls are found\n"
            "      --uar-flags F     auto (default): I/O memory, else DEVICEMAP|PORTABLE; iomem; devmap\n"
            "      --uar-api API     driver (default) or runtime (cudaHostRegister; GPU build only)\n"
            "      --inline          rate mode: inline data instead of a pointer\n"
            "      --ordering O      fence (default): WQEs and doorbell record, one fence, the doorbell;\n"
            "                        fenced-dbrec: a fence before the doorbell record as well\n"
            "      --queues WHERE    gpu (default): queues and doorbell records in GPU memory; host: in\n"
            "                        pinned host memory the GPU writes over PCIe\n"
            "      --sig-every K     rate / pingpong: signal one WQE in K (default slots/4)\n"
            "      --timeout S       fail a wait after S seconds (default 30)\n"
            "      --gap-us U        latency mode: stay idle U microseconds between operations\n"
            "      --start-delay S   wait S seconds before setting anything up\n"
            "      --linger S        after the run, keep queues and doorbell pages S seconds before\n"
            "                        tearing them down\n"
            "      --alternate       latency mode with --qps Q: the Q submitting threads take turns, one\n"
            "                        operation at a time (QPs compared within one run); latency per QP\n"
            "      --setup-gate FILE set up the first pair, say so on stderr, then wait until FILE\n"
            "                        exists before setting up the others (to attach a tracer between)\n"
            "  -d, --dev NAME        RDMA device (default: the first)\n"
            "      --json FILE       write the JSON summary to FILE instead of stdout\n"
            "      --quiet           no progress on stderr\n"
            "      --transport T     rc (default): connected pairs of RC QPs; dc: each submitting QP a DCI\n"
            "                        (DevX), its peer a DCT (mlx5dv_create_qp), every WQE with the AV\n"
            "      --dc-av BYTES     dc: the address vector in each WQE, 16 (default) or 48 bytes\n"
            "The exit status is 0 only if every result verified.\n",
            gda_backend);
}

static int parse_kinds(const char *s, uint32_t *out)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", s);
    uint32_t k = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "write"))
            k |= GDA_K_WRITE;
        else if (!strcmp(t, "read"))
            k |= GDA_K_READ;
        else if (!strcmp(t, "fadd"))
            k |= GDA_K_FADD;
        else if (!strcmp(t, "writev"))
            k |= GDA_K_WRITEV;
        else if (!strcmp(t, "mcas"))
            k |= GDA_K_MCAS;
        else if (!strcmp(t, "mfadd"))
            k |= GDA_K_MFADD;
        else if (!strcmp(t, "mcas4"))
            k |= GDA_K_MCAS4;
        else if (!strcmp(t, "mfadd4"))
            k |= GDA_K_MFADD4;
        else
            return -1;
    }
    *out = k;
    return k ? 0 : -1;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"mode", 1, 0, 'm'},     {"iters", 1, 0, 'n'},  {"ops", 1, 0, 'O'},       {"qps", 1, 0, 'q'},
        {"batch", 1, 0, 'b'},    {"slots", 1, 0, 's'},  {"area", 1, 0, 'A'},      {"warmup", 1, 0, 'w'},
        {"op", 1, 0, 'o'},       {"db-style", 1, 0, 'D'}, {"resolve", 1, 0, 'R'}, {"uar-flags", 1, 0, 'U'},
        {"uar-api", 1, 0, 'P'},  {"inline", 0, 0, 'I'}, {"sig-every", 1, 0, 'S'}, {"timeout", 1, 0, 'T'},
        {"dev", 1, 0, 'd'},      {"quiet", 0, 0, 'Q'},  {"help", 0, 0, 'h'},      {"json", 1, 0, 'J'},     {"gap-us", 1, 0, 'G'},    {"queues", 1, 0, 'W'},    {"ordering", 1, 0, 'F'},  {"start-delay", 1, 0, 'Y'},
        {"linger", 1, 0, 'L'},   {"alternate", 0, 0, 'X'}, {"setup-gate", 1, 0, 'g'}, {"transport", 1, 0, 'C'},
        {"dc-av", 1, 0, 'V'},    {0, 0, 0, 0}};
    *o = (struct opts){.mode = GDA_MODE_OPS, .kinds = GDA_K_WRITE | GDA_K_READ | GDA_K_FADD, .n = 1000, .pairs = 1,
                       .batch = 1, .slots = 64, .area = 16, .warmup = 100, .lat_kind = GDA_K_WRITE,
                       .timeout_s = 30, .dc_av = 16};
    int c;
    while ((c = getopt_long(argc, argv, "m:n:q:b:s:w:d:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (!strcmp(optarg, "ops"))
                o->mode = GDA_MODE_OPS;
            else if (!strcmp(optarg, "latency"))
                o->mode = GDA_MODE_LATENCY;
            else if (!strcmp(optarg, "pingpong"))
                o->mode = GDA_MODE_PINGPONG;
            else if (!strcmp(optarg, "rate"))
                o->mode = GDA_MODE_RATE;
            else {
                fprintf(stderr, "gda_example: unknown mode '%s'\n", optarg);
                return -1;
            }
            break;
        case 'n': o->n = strtoull(optarg, NULL, 0); break;
        case 'O':
            if (parse_kinds(optarg, &o->kinds)) {
                fprintf(stderr, "gda_example: --ops takes write,read,fadd,writev,mcas,mfadd,mcas4,mfadd4\n");
                return -1;
            }
            break;
        case 'q': o->pairs = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'b': o->batch = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 's': o->slots = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'A': o->area = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'w': o->warmup = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'o':
            if (parse_kinds(optarg, &o->lat_kind) || (o->lat_kind & (o->lat_kind - 1)) || o->lat_kind > GDA_K_FADD) {
                fprintf(stderr, "gda_example: --op takes write, read or fadd\n");
                return -1;
            }
            break;
        case 'D':
            if (!strcmp(optarg, "next"))
                o->db_style = GDA_DB_NEXT;
            else if (!strcmp(optarg, "last"))
                o->db_style = GDA_DB_LAST;
            else {
                fprintf(stderr, "gda_example: --db-style takes next or last\n");
                return -1;
            }
            break;
        case 'R': o->procaddress = !strcmp(optarg, "procaddress"); break;
        case 'U': o->uar_flags = !strcmp(optarg, "iomem") ? 1 : !strcmp(optarg, "devmap") ? 2 : 0; break;
        case 'P': o->uar_runtime = !strcmp(optarg, "runtime"); break;
        case 'I': o->inline_data = 1; break;
        case 'S': o->sig_every = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'T': o->timeout_s = strtod(optarg, NULL); break;
        case 'd': o->dev = optarg; break;
        case 'Q': o->quiet = 1; break;
        case 'J': o->json = optarg; break;
        case 'G': o->gap_us = strtod(optarg, NULL); break;
        case 'Y': o->start_delay_s = strtod(optarg, NULL); break;
        case 'L': o->linger_s = strtod(optarg, NULL); break;
        case 'X': o->alternate = 1; break;
        case 'g': o->setup_gate = optarg; break;
        case 'F':
            if (strcmp(optarg, "fence") && strcmp(optarg, "fenced-dbrec")) {
                fprintf(stderr, "gda_example: --ordering takes fence or fenced-dbrec\n");
                return -1;
            }
            o->fenced_dbrec = !strcmp(optarg, "fenced-dbrec");
            break;
        case 'W':
            if (strcmp(optarg, "gpu") && strcmp(optarg, "host")) {
                fprintf(stderr, "gda_example: --queues takes gpu or host\n");
                return -1;
            }
            o->host_queues = !strcmp(optarg, "host");
            break;
        case 'C':
            if (strcmp(optarg, "rc") && strcmp(optarg, "dc")) {
                fprintf(stderr, "gda_example: --transport takes rc or dc\n");
                return -1;
            }
            o->dc = !strcmp(optarg, "dc");
            break;
        case 'V':
            o->dc_av = (uint32_t)atoi(optarg);
            if (o->dc_av != 16 && o->dc_av != 48) {
                fprintf(stderr, "gda_example: --dc-av takes 16 or 48\n");
                return -1;
            }
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gda_example: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    /* a DCI's address vector makes a fetch-add (16-byte AV) or any WQE (48-byte AV) two blocks;
     * so does a vectored write's or an 8-byte masked compare-swap's extra segments */
    uint32_t max_bb = ((o->kinds & (GDA_K_WRITEV | GDA_K_MCAS)) && o->mode == GDA_MODE_OPS) || o->dc ? 2 : 1;
    if (o->slots < 2 || (o->slots & (o->slots - 1)) || o->slots > 32768) {
        fprintf(stderr, "gda_example: --slots must be a power of two from 2 to 32768\n");
        return -1;
    }
    if (o->batch < 1 || o->batch * max_bb > o->slots) {
        fprintf(stderr, "gda_example: --batch must be 1 .. %u for %u slots\n", o->slots / max_bb, o->slots);
        return -1;
    }
    if (o->pairs < 1 || o->pairs > 512 || o->area < 1 || o->n < 1) {
        fprintf(stderr, "gda_example: --qps 1..512, --area >= 1, --iters >= 1\n");
        return -1;
    }
    if (o->alternate && o->mode != GDA_MODE_LATENCY) {
        fprintf(stderr, "gda_example: --alternate is for latency mode\n");
        return -1;
    }
    if (o->mode == GDA_MODE_PINGPONG || (o->mode == GDA_MODE_LATENCY && !o->alternate))
        o->pairs = 1;
    if (!o->sig_every || o->sig_every > o->slots / 4)
        o->sig_every = o->slots / 4 ? o->slots / 4 : 1;
    if (o->uar_runtime && !gda_runtime_map_uar) {
        fprintf(stderr, "gda_example: --uar-api runtime needs the GPU build\n");
        return -1;
    }
    return 0;
}

/* ---- CUDA driver ---------------------------------------------------------------------------- */

static struct gda_cu cu;

static const char *cu_str(gda_CUresult r)
{
    const char *s = NULL;
    if (cu.GetErrorString && cu.GetErrorString(r, &s) == 0 && s)
        return s;
    return "unknown CUDA error";
}

#define CU(call)                                                                                    \
    do {                                                                                            \
        gda_CUresult r_ = (call);                                                                   \
        if (r_ != GDA_CUDA_SUCCESS) {                                                               \
            fprintf(stderr, "gda_example: %s failed: %s (%d)\n", #call, cu_str(r_), r_);            \
            return -1;                                                                              \
        }                                                                                           \
    } while (0)

int gda_cu_load(struct gda_cu *c, int procaddress, char *err, size_t errlen)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(err, errlen, "cannot load the CUDA driver (libcuda.so.1): %s", dlerror());
        return -1;
    }
    static const struct {
        const char *base, *sym; /* cuGetProcAddress name, exported name */
        size_t off;
    } fns[] = {
        {"cuInit", "cuInit", offsetof(struct gda_cu, Init)},
        {"cuDeviceGet", "cuDeviceGet", offsetof(struct gda_cu, DeviceGet)},
        {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", offsetof(struct gda_cu, DevicePrimaryCtxRetain)},
        {"cuCtxSetCurrent", "cuCtxSetCurrent", offsetof(struct gda_cu, CtxSetCurrent)},
        {"cuMemAlloc", "cuMemAlloc_v2", offsetof(struct gda_cu, MemAlloc)},
        {"cuMemFree", "cuMemFree_v2", offsetof(struct gda_cu, MemFree)},
        {"cuMemcpyHtoD", "cuMemcpyHtoD_v2", offsetof(struct gda_cu, MemcpyHtoD)},
        {"cuMemcpyDtoH", "cuMemcpyDtoH_v2", offsetof(struct gda_cu, MemcpyDtoH)},
        {"cuMemHostAlloc", "cuMemHostAlloc", offsetof(struct gda_cu, MemHostAlloc)},
        {"cuMemFreeHost", "cuMemFreeHost", offsetof(struct gda_cu, MemFreeHost)},
        {"cuMemHostRegister", "cuMemHostRegister_v2", offsetof(struct gda_cu, MemHostRegister)},
        {"cuMemHostUnregister", "cuMemHostUnregister", offsetof(struct gda_cu, MemHostUnregister)},
        {"cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2", offsetof(struct gda_cu, MemHostGetDevicePointer)},
        {"cuGetErrorString", "cuGetErrorString", offsetof(struct gda_cu, GetErrorString)},
    };
    typedef gda_CUresult (*getproc_t)(const char *, void **, int, uint64_t, int *);
    getproc_t getproc = NULL;
    if (procaddress) {
        getproc = (getproc_t)dlsym(h, "cuGetProcAddress_v2");
        if (!getproc) {
            snprintf(err, errlen, "the CUDA driver has no cuGetProcAddress_v2");
            return -1;
        }
    }
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        void *fn = NULL;
        if (getproc) {
            int status = 0;
            gda_CUresult r = getproc(fns[i].base, &fn, 12000, 0, &status);
            if (r != GDA_CUDA_SUCCESS)
                fn = NULL;
        } else {
            fn = dlsym(h, fns[i].sym);
        }
        if (!fn) {
            snprintf(err, errlen, "the CUDA driver lacks %s", fns[i].sym);
            return -1;
        }
        memcpy((char *)c + fns[i].off, &fn, sizeof(fn));
    }
    return 0;
}

/* ---- the queues ----------------------------------------------------------------------------- */

/* Queue memory: GPU memory (the NIC reaches it by GPUDirect), or pinned host memory mapped for
 * the GPU.  `nic` is the address the NIC is given (umem), `dev` the one the GPU uses. */
struct qmem {
    gda_CUdeviceptr dev;
    void *host; /* NULL for GPU memory */
    uint64_t nic;
    size_t bytes;
};

static gda_CUresult qmem_alloc(struct qmem *m, size_t bytes, int on_host)
{
    gda_CUresult r;
    m->bytes = bytes;
    if (!on_host) {
        m->host = NULL;
        r = cu.MemAlloc(&m->dev, bytes);
        m->nic = m->dev;
        return r;
    }
    r = cu.MemHostAlloc(&m->host, bytes, GDA_CU_MEMHOSTALLOC_PORTABLE | GDA_CU_MEMHOSTALLOC_DEVICEMAP);
    if (r == GDA_CUDA_SUCCESS)
        r = cu.MemHostGetDevicePointer(&m->dev, m->host, 0);
    m->nic = (uint64_t)(uintptr_t)m->host;
    return r;
}

static gda_CUresult qmem_write(struct qmem *m, const void *src, size_t n)
{
    if (m->host) {
        memcpy(m->host, src, n);
        return GDA_CUDA_SUCCESS;
    }
    return cu.MemcpyHtoD(m->dev, src, n);
}

static void qmem_free(struct qmem *m)
{
    if (m->host)
        cu.MemFreeHost(m->host);
    else if (m->dev)
        cu.MemFree(m->dev);
    m->host = NULL;
    m->dev = 0;
}

struct qp_res {
    struct mlx5dv_devx_uar *uar;
    struct mlx5dv_devx_umem *wq_umem, *cq_umem, *dbr_umem;
    struct qmem wq, cq, dbr;
    struct mlx5dv_devx_obj *cq_obj, *qp_obj;
    uint32_t qpn, cqn, log_cq;
    uint8_t *buf;            /* pinned host buffer (registered) */
    gda_CUdeviceptr buf_dev; /* the GPU's address for it */
    struct ibv_mr *mr;
    void *uar_page;          /* registered with CUDA (NULL if not) */
    gda_CUdeviceptr db;      /* device pointer of the doorbell */
    int submits;
    struct ibv_qp *dct;      /* --transport dc: the DCT the peer's DCI reaches this QP's buffer by */
    struct ibv_cq *dct_cq;
};

struct ctx {
    struct opts o;
    struct ibv_context *ibv;
    struct ibv_pd *pd;
    uint32_t pdn, eqn;
    struct ibv_port_attr port;
    union ibv_gid gid;
    gda_CUcontext cuctx;
    uint32_t nqp;
    struct qp_res *q;
    struct ibv_srq *dct_srq; /* the DCTs' receive queue (they take no SENDs here) */
};

static int devx_cmd_ok(const char *what, int ret, const uint8_t *out)
{
    uint32_t status = (uint32_t)PRM_GET(out, PRM_OUT_STATUS), synd = (uint32_t)PRM_GET(out, PRM_OUT_SYNDROME);
    if (ret || status) {
        fprintf(stderr, "gda_example: %s failed: ret %d errno %d status 0x%x syndrome 0x%x\n", what, ret, errno, status,
                synd);
        return 0;
    }
    return 1;
}

static uint32_t log2u(uint32_t x)
{
    uint32_t l = 0;
    while ((1u << l) < x)
        l++;
    return l;
}

static int create_queues(struct ctx *c, struct qp_res *r)
{
    uint32_t slots = c->o.slots;
    r->uar = mlx5dv_devx_alloc_uar(c->ibv, MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC);
    if (!r->uar)
        r->uar = mlx5dv_devx_alloc_uar(c->ibv, MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF);
    if (!r->uar) {
        fprintf(stderr, "gda_example: mlx5dv_devx_alloc_uar failed: %s\n", strerror(errno));
        return -1;
    }
    /* queues and doorbell records in GPU memory, as GPU-initiated libraries place them */
    r->log_cq = log2u(slots);
    size_t wq_bytes = (size_t)slots * 64, cq_bytes = (size_t)64 << r->log_cq;
    int h = c->o.host_queues;
    CU(qmem_alloc(&r->wq, wq_bytes, h));
    CU(qmem_alloc(&r->cq, cq_bytes, h));
    CU(qmem_alloc(&r->dbr, 64, h));
    uint8_t *init = calloc(1, cq_bytes > wq_bytes ? cq_bytes : wq_bytes);
    if (!init)
        return -1;
    CU(qmem_write(&r->wq, init, wq_bytes));
    CU(qmem_write(&r->dbr, init, 64));
    for (size_t i = 0; i < cq_bytes / 64; i++)
        init[i * 64 + 63] = GDA_CQE_INVALID << 4; /* owner 0, not written yet */
    CU(qmem_write(&r->cq, init, cq_bytes));
    free(init);

    r->wq_umem = mlx5dv_devx_umem_reg(c->ibv, (void *)(uintptr_t)r->wq.nic, wq_bytes, IBV_ACCESS_LOCAL_WRITE);
    struct mlx5dv_devx_umem_in uin = {.addr = (void *)(uintptr_t)r->cq.nic, .size = cq_bytes,
                                      .access = IBV_ACCESS_LOCAL_WRITE, .pgsz_bitmap = ~0xfffull};
    r->cq_umem = mlx5dv_devx_umem_reg_ex(c->ibv, &uin);
    r->dbr_umem = mlx5dv_devx_umem_reg(c->ibv, (void *)(uintptr_t)r->dbr.nic, 64, IBV_ACCESS_LOCAL_WRITE);
    if (!r->wq_umem || !r->cq_umem || !r->dbr_umem) {
        fprintf(stderr, "gda_example: mlx5dv_devx_umem_reg on %s memory failed: %s\n", h ? "host" : "GPU",
                strerror(errno));
        return -1;
    }

    uint8_t in[PRM_IN_BYTES], out[PRM_OUT_BYTES];
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    PRM_SET(in, PRM_OPCODE, PRM_CREATE_CQ);
    PRM_SET(in, PRM_CQ_CQE_SZ, 0); /* 64-byte CQEs */
    PRM_SET(in, PRM_CQ_LOG_SIZE, r->log_cq);
    PRM_SET(in, PRM_CQ_UAR_PAGE, r->uar->page_id);
    PRM_SET(in, PRM_CQ_C_EQN, c->eqn);
    PRM_SET(in, PRM_CQ_LOG_PAGE_SIZE, 0);
    PRM_SET(in, PRM_CQ_DBR_UMEM_VALID, 1);
    PRM_SET(in, PRM_CQ_DBR_UMEM_ID, r->dbr_umem->umem_id);
    PRM_SET(in, PRM_CQ_DBR_ADDR, 32); /* CQ record at dbr + 32, SQ record at dbr + 0 */
    PRM_SET(in, PRM_CQ_UMEM_VALID, 1);
    PRM_SET(in, PRM_CQ_UMEM_ID, r->cq_umem->umem_id);
    PRM_SET(in, PRM_CQ_UMEM_OFFSET, 0);
    r->cq_obj = mlx5dv_devx_obj_create(c->ibv, in, sizeof(in), out, sizeof(out));
    if (!devx_cmd_ok("CREATE_CQ", r->cq_obj ? 0 : -1, out))
        return -1;
    r->cqn = (uint32_t)PRM_GET(out, PRM_OUT_ID);

    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    PRM_SET(in, PRM_OPCODE, PRM_CREATE_QP);
    PRM_SET(in, PRM_QPC_ST, c->o.dc ? PRM_ST_DCI : PRM_ST_RC);
    PRM_SET(in, PRM_QPC_PM_STATE, PRM_PM_MIGRATED);
    PRM_SET(in, PRM_QPC_PD, c->pdn);
    PRM_SET(in, PRM_QPC_LOG_SQ_SIZE, log2u(slots));
    PRM_SET(in, PRM_QPC_RQ_TYPE, PRM_RQ_ZERO_LEN); /* no receive queue: RDMA and atomics only */
    PRM_SET(in, PRM_QPC_UAR_PAGE, r->uar->page_id);
    PRM_SET(in, PRM_QPC_LOG_PAGE_SIZE, 0);
    PRM_SET(in, PRM_QPC_CQN_SND, r->cqn);
    PRM_SET(in, PRM_QPC_CQN_RCV, r->cqn);
    PRM_SET(in, PRM_QPC_DBR_UMEM_VALID, 1);
    PRM_SET(in, PRM_QPC_DBR_UMEM_ID, r->dbr_umem->umem_id);
    PRM_SET(in, PRM_QPC_DBR_ADDR, 0);
    PRM_SET(in, PRM_QP_WQ_UMEM_VALID, 1);
    PRM_SET(in, PRM_QP_WQ_UMEM_ID, r->wq_umem->umem_id);
    PRM_SET(in, PRM_QP_WQ_UMEM_OFFSET, 0);
    r->qp_obj = mlx5dv_devx_obj_create(c->ibv, in, sizeof(in), out, sizeof(out));
    if (!devx_cmd_ok("CREATE_QP", r->qp_obj ? 0 : -1, out))
        return -1;
    r->qpn = (uint32_t)PRM_GET(out, PRM_OUT_ID);
    return 0;
}

static int modify(struct ctx *c, struct qp_res *r, uint32_t opcode, const struct qp_res *peer)
{
    uint8_t in[PRM_IN_BYTES], out[PRM_OUT_BYTES];
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    PRM_SET(in, PRM_OPCODE, opcode);
    PRM_SET(in, PRM_QP_QPN, r->qpn);
    PRM_SET(in, PRM_ADS_VHCA_PORT, 1);
    const char *what = "RST2INIT_QP";
    if (opcode == PRM_RST2INIT_QP) {
        PRM_SET(in, PRM_QPC_PM_STATE, PRM_PM_MIGRATED);
        PRM_SET(in, PRM_ADS_PKEY_INDEX, 0);
        if (c->o.dc) { /* a DCI: its key; remote access is the DCTs' business */
            PRM_SET(in, PRM_QPC_DC_ACCESS_KEY, GDA_DC_KEY);
        } else {
            PRM_SET(in, PRM_QPC_RRE, 1);
            PRM_SET(in, PRM_QPC_RWE, 1);
            PRM_SET(in, PRM_QPC_RAE, 1);
        }
    } else if (opcode == PRM_INIT2RTR_QP && c->o.dc) {
        what = "INIT2RTR_QP"; /* a DCI has no remote: each WQE's AV names its DCT */
        PRM_SET(in, PRM_QPC_MTU, c->port.active_mtu);
        PRM_SET(in, PRM_QPC_LOG_MSG_MAX, 30);
    } else if (opcode == PRM_INIT2RTR_QP) {
        what = "INIT2RTR_QP";
        PRM_SET(in, PRM_QPC_MTU, c->port.active_mtu);
        PRM_SET(in, PRM_QPC_LOG_MSG_MAX, 30);
        PRM_SET(in, PRM_QPC_REMOTE_QPN, peer->qpn);
        PRM_SET(in, PRM_QPC_NEXT_RCV_PSN, 0);
        PRM_SET(in, PRM_QPC_LOG_RRA_MAX, 4);
        PRM_SET(in, PRM_QPC_MIN_RNR_NAK, 12);
        if (c->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
            PRM_SET(in, PRM_ADS_GRH, 1);
            PRM_SET(in, PRM_ADS_HOP_LIMIT, 64);
            memcpy(in + PRM_ADS_RGID / 8, c->gid.raw, 16);
        } else {
            PRM_SET(in, PRM_ADS_RLID, c->port.lid);
        }
    } else {
        what = "RTR2RTS_QP";
        PRM_SET(in, PRM_QPC_RETRY_COUNT, 7);
        PRM_SET(in, PRM_QPC_RNR_RETRY, 7);
        PRM_SET(in, PRM_QPC_NEXT_SEND_PSN, 0);
        PRM_SET(in, PRM_QPC_LOG_SRA_MAX, 4);
        PRM_SET(in, PRM_ADS_ACK_TIMEOUT, 14);
    }
    int ret = mlx5dv_devx_obj_modify(r->qp_obj, in, sizeof(in), out, sizeof(out));
    return devx_cmd_ok(what, ret, out) ? 0 : -1;
}

/* --transport dc: the DCT through which the peer's DCI reaches R's buffer (verbs, as NVSHMEM
 * makes its DCTs): RESET -> INIT (remote access) -> RTR. */
static int create_dct(struct ctx *c, struct qp_res *r)
{
    if (!c->dct_srq) {
        struct ibv_srq_init_attr sa = {.attr = {.max_wr = 1, .max_sge = 1}};
        c->dct_srq = ibv_create_srq(c->pd, &sa);
    }
    r->dct_cq = ibv_create_cq(c->ibv, 16, NULL, NULL, 0);
    if (!c->dct_srq || !r->dct_cq) {
        fprintf(stderr, "gda_example: the DCT's SRQ or CQ failed: %s\n", strerror(errno));
        return -1;
    }
    struct ibv_qp_init_attr_ex qa = {.qp_type = IBV_QPT_DRIVER, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = c->pd,
                                     .send_cq = r->dct_cq, .recv_cq = r->dct_cq, .srq = c->dct_srq};
    struct mlx5dv_qp_init_attr dv = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
                                     .dc_init_attr = {.dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = GDA_DC_KEY}};
    r->dct = mlx5dv_create_qp(c->ibv, &qa, &dv);
    if (!r->dct) {
        fprintf(stderr, "gda_example: mlx5dv_create_qp (DCT) failed: %s\n", strerror(errno));
        return -1;
    }
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
    if (ibv_modify_qp(r->dct, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        fprintf(stderr, "gda_example: DCT to INIT failed\n");
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = c->port.active_mtu;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = 1;
    a.ah_attr.dlid = c->port.lid;
    if (c->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.hop_limit = 64;
        memcpy(a.ah_attr.grh.dgid.raw, c->gid.raw, 16);
    }
    if (ibv_modify_qp(r->dct, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER)) {
        fprintf(stderr, "gda_example: DCT to RTR failed\n");
        return -1;
    }
    return 0;
}

/* The address vector a DCI's WQEs carry to reach DCT: its first 16 bytes as the thread stores
 * them (dc_key, dqp_dct with the extended bit for the 48-byte form, sl 0, rlid). */
static void dc_av_words(const struct ctx *c, const struct ibv_qp *dct, struct gda_sq *sq)
{
    sq->av_ds = c->o.dc_av / 16;
    sq->av[0] = gda_hi(GDA_DC_KEY);
    sq->av[1] = gda_lo(GDA_DC_KEY);
    sq->av[2] = gda_bswap32(dct->qp_num | (c->o.dc_av == 48 ? MLX5_EXTENDED_UD_AV : 0));
    sq->av[3] = gda_bswap32(c->port.lid);
}

/* Map the doorbell register for the GPU: register its page, then ask for a device pointer. */
static int map_doorbell(struct ctx *c, struct qp_res *r)
{
    void *reg = r->uar->reg_addr;
    void *page = (void *)((uintptr_t)reg & ~(uintptr_t)4095);
    unsigned devmap = GDA_CU_MEMHOSTREGISTER_DEVICEMAP | GDA_CU_MEMHOSTREGISTER_PORTABLE;
    unsigned flags[2] = {devmap | GDA_CU_MEMHOSTREGISTER_IOMEMORY, devmap};
    int first = c->o.uar_flags == 2 ? 1 : 0, last = c->o.uar_flags == 1 ? 0 : 1;
    char err[256] = "";
    for (int i = first; i <= last; i++) {
        if (c->o.uar_runtime) {
            uint64_t d = 0;
            if (gda_runtime_map_uar(page, 4096, flags[i], reg, &d, err, sizeof(err)) == 0) {
                r->uar_page = page;
                r->db = d;
                return 0;
            }
            continue;
        }
        gda_CUresult rr = cu.MemHostRegister(page, 4096, flags[i]);
        if (rr != GDA_CUDA_SUCCESS) {
            snprintf(err, sizeof(err), "cuMemHostRegister(flags 0x%x): %s", flags[i], cu_str(rr));
            /* an emulated UAR is ordinary memory, which CUDA will not map as I/O memory */
            continue;
        }
        r->uar_page = page;
        CU(cu.MemHostGetDevicePointer(&r->db, reg, 0));
        return 0;
    }
    fprintf(stderr, "gda_example: cannot map the doorbell for the GPU: %s\n", err);
    return -1;
}

/* The first pair is ready: say so, and wait for the gate file (a tracer attaching meanwhile). */
static int wait_gate(struct ctx *c)
{
    fprintf(stderr, "gda_example: first pair ready, waiting for %s\n", c->o.setup_gate);
    fflush(stderr);
    for (double waited = 0; access(c->o.setup_gate, F_OK) != 0; waited += 0.01) {
        if (waited > c->o.timeout_s) {
            fprintf(stderr, "gda_example: %s did not appear within %.0f s\n", c->o.setup_gate, c->o.timeout_s);
            return -1;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int setup(struct ctx *c)
{
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num), *dev = NULL;
    for (int i = 0; list && i < num; i++)
        if (!c->o.dev || !strcmp(ibv_get_device_name(list[i]), c->o.dev)) {
            dev = list[i];
            break;
        }
    if (!dev) {
        fprintf(stderr, "gda_example: no RDMA device%s%s found (on a machine without one, run it on the emulated NIC: sigmatrace simnic run -- ...)\n",
                c->o.dev ? " " : "", c->o.dev ? c->o.dev : "");
        if (list)
            ibv_free_device_list(list);
        return -1;
    }
    struct mlx5dv_context_attr attr = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};
    c->ibv = mlx5dv_open_device(dev, &attr);
    ibv_free_device_list(list);
    if (!c->ibv) {
        fprintf(stderr, "gda_example: mlx5dv_open_device (devx) failed: %s\n", strerror(errno));
        return -1;
    }
    if (ibv_query_port(c->ibv, 1, &c->port) || ibv_query_gid(c->ibv, 1, 0, &c->gid)) {
        fprintf(stderr, "gda_example: querying port 1 failed\n");
        return -1;
    }
    c->pd = ibv_alloc_pd(c->ibv);
    struct mlx5dv_pd dvpd;
    struct mlx5dv_obj obj = {.pd = {.in = c->pd, .out = &dvpd}};
    if (!c->pd || mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD)) {
        fprintf(stderr, "gda_example: protection domain failed\n");
        return -1;
    }
    c->pdn = dvpd.pdn;
    if (mlx5dv_devx_query_eqn(c->ibv, 0, &c->eqn)) {
        fprintf(stderr, "gda_example: mlx5dv_devx_query_eqn failed: %s\n", strerror(errno));
        return -1;
    }
    c->nqp = 2 * c->o.pairs;
    c->q = calloc(c->nqp, sizeof(*c->q));
    if (!c->q)
        return -1;
    size_t bytes = GDA_BUF_BYTES(c->o.area);
    /* pair by pair: queues, buffers, connection, doorbell (so that a tracer attached at the
     * gate sees the later pairs made from scratch) */
    for (uint32_t p = 0; p < c->o.pairs; p++) {
        for (uint32_t i = 2 * p; i < 2 * p + 2; i++) {
            struct qp_res *r = &c->q[i];
            if (create_queues(c, r))
                return -1;
            CU(cu.MemHostAlloc((void **)&r->buf, bytes, GDA_CU_MEMHOSTALLOC_PORTABLE | GDA_CU_MEMHOSTALLOC_DEVICEMAP));
            CU(cu.MemHostGetDevicePointer(&r->buf_dev, r->buf, 0));
            r->mr = ibv_reg_mr(c->pd, r->buf, bytes,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
            if (!r->mr) {
                fprintf(stderr, "gda_example: ibv_reg_mr failed: %s\n", strerror(errno));
                return -1;
            }
            r->submits = (i % 2 == 0) || c->o.mode == GDA_MODE_PINGPONG;
            if (c->o.dc && create_dct(c, r))
                return -1;
        }
        for (uint32_t i = 2 * p; i < 2 * p + 2; i++) {
            struct qp_res *r = &c->q[i], *peer = &c->q[i ^ 1];
            if (modify(c, r, PRM_RST2INIT_QP, peer) || modify(c, r, PRM_INIT2RTR_QP, peer) ||
                modify(c, r, PRM_RTR2RTS_QP, peer))
                return -1;
        }
        for (uint32_t i = 2 * p; i < 2 * p + 2; i++)
            if (c->q[i].submits && map_doorbell(c, &c->q[i]))
                return -1;
        if (p == 0 && c->o.setup_gate && wait_gate(c))
            return -1;
    }
    return 0;
}

static void teardown(struct ctx *c)
{
    for (uint32_t i = 0; c->q && i < c->nqp; i++) {
        struct qp_res *r = &c->q[i];
        if (r->uar_page) {
            if (c->o.uar_runtime)
                gda_runtime_unmap_uar(r->uar_page);
            else
                cu.MemHostUnregister(r->uar_page);
        }
        if (r->dct)
            ibv_destroy_qp(r->dct);
        if (r->dct_cq)
            ibv_destroy_cq(r->dct_cq);
        if (r->qp_obj)
            mlx5dv_devx_obj_destroy(r->qp_obj);
        if (r->cq_obj)
            mlx5dv_devx_obj_destroy(r->cq_obj);
        if (r->wq_umem)
            mlx5dv_devx_umem_dereg(r->wq_umem);
        if (r->cq_umem)
            mlx5dv_devx_umem_dereg(r->cq_umem);
        if (r->dbr_umem)
            mlx5dv_devx_umem_dereg(r->dbr_umem);
        if (r->uar)
            mlx5dv_devx_free_uar(r->uar);
        if (r->mr)
            ibv_dereg_mr(r->mr);
        if (r->buf)
            cu.MemFreeHost(r->buf);
        qmem_free(&r->wq);
        qmem_free(&r->cq);
        qmem_free(&r->dbr);
    }
    if (c->dct_srq)
        ibv_destroy_srq(c->dct_srq);
    if (c->pd)
        ibv_dealloc_pd(c->pd);
    if (c->ibv)
        ibv_close_device(c->ibv);
}

/* ---- buffer contents ------------------------------------------------------------------------ */

static uint8_t pat0(uint32_t qp, uint64_t s, uint32_t j) { return (uint8_t)(qp * 31 + s * 7 + j + 1); }
static uint8_t pat1(uint32_t qp, uint64_t s, uint32_t j) { return (uint8_t)(0x80 ^ (qp * 13 + s * 5 + j)); }
static uint64_t counter0(uint32_t qp) { return 1000ull * (qp + 1); }
/* Initial masked-atomic targets of a QP: mcas, mfadd (8 bytes), mcas4, mfadd4 (4 bytes); the
 * fetch-add ones near the top of their low field, so that carries reach the field boundary. */
static uint64_t mtarget0(uint32_t qp, int which)
{
    static const uint64_t base[4] = {0xa5a5a5a500000000ull, 0x7ffffff0fffffff0ull, 0xa5a50000ull, 0x7ff0fff0ull};
    return base[which] + qp;
}

static void fill_buffers(struct ctx *c)
{
    uint32_t S = c->o.area;
    for (uint32_t i = 0; i < c->nqp; i++) {
        uint8_t *b = c->q[i].buf;
        for (uint32_t s = 0; s < S; s++)
            for (uint32_t j = 0; j < 64; j++) {
                b[GDA_A0(S) + s * 64 + j] = pat0(i, s, j);
                b[GDA_A1(S) + s * 64 + j] = pat1(i, s, j);
            }
        memset(b + GDA_A2(S), 0xff, (size_t)S * 8);
        uint64_t c0 = counter0(i), zero = 0;
        memcpy(b + GDA_COUNTER(S), &c0, 8);
        memcpy(b + GDA_FLAG(S), &zero, 8);
        memset(b + GDA_A3(S), 0xff, (size_t)S * 32);    /* the four masked-atomic result areas */
        uint64_t t8[2] = {mtarget0(i, 0), mtarget0(i, 1)};
        uint32_t t4[4] = {(uint32_t)mtarget0(i, 2), 0, (uint32_t)mtarget0(i, 3), 0};
        memcpy(b + GDA_MTARGET(S), t8, 16);
        memcpy(b + GDA_MTARGET(S) + 16, t4, 16);
    }
}

struct verify {
    uint64_t checked, failed;
    char first[8][200];
};

static void vfail(struct verify *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vfail(struct verify *v, const char *fmt, ...)
{
    if (v->failed < 8) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v->first[v->failed], sizeof(v->first[0]), fmt, ap);
        va_end(ap);
    }
    v->failed++;
}

/* bytes [0, upto) of remote equal local's; [upto, 64) still as filled */
static void check_area(struct verify *v, const char *what, uint32_t qp, uint64_t s, const uint8_t *got,
                       const uint8_t *want, uint32_t upto, uint8_t (*initial)(uint32_t, uint64_t, uint32_t))
{
    v->checked++;
    for (uint32_t j = 0; j < 64; j++) {
        uint8_t w = j < upto ? want[j] : initial(qp, s, j);
        if (got[j] != w) {
            vfail(v, "%s: qp %u slot %" PRIu64 " byte %u is 0x%02x, expected 0x%02x", what, qp, s, j, got[j], w);
            return;
        }
    }
}

/* Masked atomics as the PRM defines them, written bit by bit (the NIC's own code is not used
 * to check it): compare-swap under masks; fetch-add with a carry that stops at field
 * boundaries.  Returns the new value of `old` (`bytes` wide). */
static uint64_t ref_amo(int cas, const struct gda_amo *a, uint64_t old, uint32_t bytes)
{
    uint32_t bits = bytes * 8;
    uint64_t width = bits == 64 ? UINT64_MAX : (1ull << bits) - 1, out = 0, carry = 0;
    if (cas) {
        for (uint32_t b = 0; b < bits; b++)
            if (((a->compare_mask >> b) & 1) && (((old ^ a->compare) >> b) & 1))
                return old;
        return ((old & ~a->swap_mask) | (a->swap_add & a->swap_mask)) & width;
    }
    for (uint32_t b = 0; b < bits; b++) {
        uint64_t sum = ((old >> b) & 1) + ((a->swap_add >> b) & 1) + carry;
        out |= (sum & 1) << b;
        carry = (sum >> 1) && !((a->swap_mask >> b) & 1);
    }
    return out;
}

/* One masked-atomic kind of a pair: every fetched value (the last operation of each result slot)
 * and the final target word, by replaying the operations in order. */
static void verify_masked(struct ctx *c, struct verify *v, uint32_t a, uint32_t b, uint32_t kind)
{
    uint32_t S = c->o.area, bytes = (kind == GDA_K_MCAS || kind == GDA_K_MFADD) ? 8 : 4;
    int cas = kind == GDA_K_MCAS || kind == GDA_K_MCAS4;
    int which = kind == GDA_K_MCAS ? 0 : kind == GDA_K_MFADD ? 1 : kind == GDA_K_MCAS4 ? 2 : 3;
    const char *name = which == 0 ? "mcas" : which == 1 ? "mfadd" : which == 2 ? "mcas4" : "mfadd4";
    uint64_t res_off = which == 0 ? GDA_A3(S) : which == 1 ? GDA_A4(S) : which == 2 ? GDA_A5(S) : GDA_A6(S);
    uint64_t tgt_off = GDA_MTARGET(S) + 8u * (uint32_t)which;
    const uint8_t *A = c->q[a].buf, *B = c->q[b].buf;
    uint64_t val = mtarget0(b, which);
    for (uint64_t i = 0; i < c->o.n; i++) {
        struct gda_amo op = cas ? gda_mcas_op(i, bytes) : gda_mfadd_op(i, bytes);
        uint64_t s = i % S, before = val;
        val = ref_amo(cas, &op, val, bytes);
        if (i + S < c->o.n)
            continue; /* a later operation overwrote this result slot */
        uint8_t want[8];
        memset(want, 0xff, 8);
        if (bytes == 8) {
            memcpy(want, &before, 8);
        } else { /* 4 bytes come back big-endian; the rest of the slot stays as filled */
            for (int k = 0; k < 4; k++)
                want[k] = (uint8_t)(before >> (24 - 8 * k));
        }
        v->checked++;
        if (memcmp(A + res_off + s * 8, want, 8)) {
            uint64_t got;
            memcpy(&got, A + res_off + s * 8, 8);
            vfail(v, "%s result: qp %u op %" PRIu64 " slot %" PRIu64 " holds 0x%016" PRIx64 ", expected 0x%016" PRIx64
                  " in its first %u bytes", name, a, i, s, got, before, bytes);
        }
    }
    uint64_t got = 0;
    memcpy(&got, B + tgt_off, bytes);
    v->checked++;
    if (got != val)
        vfail(v, "%s target of qp %u is 0x%" PRIx64 ", expected 0x%" PRIx64, name, b, got, val);
}

static void verify_ops(struct ctx *c, struct verify *v)
{
    uint32_t S = c->o.area;
    uint64_t n = c->o.n;
    for (uint32_t p = 0; p < c->o.pairs; p++) {
        uint32_t a = 2 * p, b = a + 1;
        const uint8_t *A = c->q[a].buf, *B = c->q[b].buf;
        for (uint64_t s = 0; s < S; s++) {
            uint32_t maxw = 0, maxr = 0;
            for (uint64_t i = s; i < n; i += S) {
                if ((c->o.kinds & GDA_K_WRITE) && gda_rw_len(i) > maxw)
                    maxw = gda_rw_len(i);
                if ((c->o.kinds & GDA_K_WRITEV) && 48 > maxw)
                    maxw = 48;
                if ((c->o.kinds & GDA_K_READ) && gda_rw_len(i) > maxr)
                    maxr = gda_rw_len(i);
            }
            check_area(v, "write", b, s, B + GDA_A0(S) + s * 64, A + GDA_A0(S) + s * 64, maxw, pat0);
            check_area(v, "read", a, s, A + GDA_A1(S) + s * 64, B + GDA_A1(S) + s * 64, maxr, pat1);
            if (c->o.kinds & GDA_K_FADD) {
                uint64_t got, want = UINT64_MAX;
                memcpy(&got, A + GDA_A2(S) + s * 8, 8);
                if (s < n) {
                    uint64_t last = s + S * ((n - 1 - s) / S); /* last operation using this slot */
                    want = counter0(b) + last * (last + 1) / 2;
                }
                v->checked++;
                if (got != want)
                    vfail(v, "fetch-add result: qp %u slot %" PRIu64 " is %" PRIu64 ", expected %" PRIu64, a, s, got, want);
            }
        }
        for (uint32_t kind = GDA_K_MCAS; kind <= GDA_K_MFADD4; kind <<= 1)
            if (c->o.kinds & kind)
                verify_masked(c, v, a, b, kind);
        if (c->o.kinds & GDA_K_FADD) {
            uint64_t got, want = counter0(b) + n * (n + 1) / 2;
            memcpy(&got, B + GDA_COUNTER(S), 8);
            v->checked++;
            if (got != want)
                vfail(v, "fetch-add counter of qp %u is %" PRIu64 ", expected %" PRIu64, b, got, want);
        }
    }
}

static void verify_other(struct ctx *c, struct verify *v)
{
    uint32_t S = c->o.area;
    uint64_t total = c->o.n + (c->o.mode == GDA_MODE_RATE ? 0 : c->o.warmup);
    for (uint32_t p = 0; p < c->o.pairs; p++) {
        uint32_t a = 2 * p, b = a + 1;
        const uint8_t *A = c->q[a].buf, *B = c->q[b].buf;
        uint64_t got, want;
        if (c->o.mode == GDA_MODE_PINGPONG) {
            memcpy(&got, A + GDA_FLAG(S), 8);
            memcpy(&want, B + GDA_FLAG(S), 8);
            v->checked++;
            if (got != total || want != total)
                vfail(v, "ping-pong flags are %" PRIu64 " and %" PRIu64 ", expected %" PRIu64, got, want, total);
        } else if (c->o.mode == GDA_MODE_LATENCY) {
            if (c->o.lat_kind == GDA_K_WRITE)
                check_area(v, "write", b, 0, B + GDA_A0(S), A + GDA_A0(S), 8, pat0);
            else if (c->o.lat_kind == GDA_K_READ)
                check_area(v, "read", a, 0, A + GDA_A1(S), B + GDA_A1(S), 8, pat1);
            else {
                memcpy(&got, B + GDA_COUNTER(S), 8);
                v->checked++;
                if (got != counter0(b) + total)
                    vfail(v, "fetch-add counter of qp %u is %" PRIu64 ", expected %" PRIu64, b, got, counter0(b) + total);
            }
        } else { /* rate */
            for (uint64_t s = 0; s < S && s < total; s++) {
                uint64_t last = s + S * ((total - 1 - s) / S);
                uint8_t exp[64];
                memcpy(exp, A + GDA_A0(S) + s * 64, 64);
                if (c->o.inline_data)
                    memcpy(exp, &last, 8);
                check_area(v, "write", b, s, B + GDA_A0(S) + s * 64, exp, 8, pat0);
            }
        }
    }
}

/* ---- run ------------------------------------------------------------------------------------ */

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static const char *mode_name(int m)
{
    static const char *const names[] = {"ops", "latency", "pingpong", "rate"};
    return names[m];
}

int main(int argc, char **argv)
{
    struct ctx c = {0};
    struct gda_qp_view *views = NULL;
    uint32_t *view_qp = NULL, nthreads = 0;
    uint64_t *lat = NULL, nlat = 0;
    gda_CUdeviceptr lat_dev = 0, views_dev = 0, cfg_dev = 0, turn_dev = 0;
    if (parse_opts(argc, argv, &c.o))
        return 2;
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    if (c.o.start_delay_s > 0) {
        struct timespec ts = {(time_t)c.o.start_delay_s, (long)((c.o.start_delay_s - (time_t)c.o.start_delay_s) * 1e9)};
        while (nanosleep(&ts, &ts) && errno == EINTR)
            ;
    }
    char err[512];
    if (gda_cu_load(&cu, c.o.procaddress, err, sizeof(err))) {
        fprintf(stderr, "gda_example: %s\n", err);
        return 2;
    }
    gda_CUdevice dev;
    int rc = 1;
    if (cu.Init(0) || cu.DeviceGet(&dev, 0) || cu.DevicePrimaryCtxRetain(&c.cuctx, dev) || cu.CtxSetCurrent(c.cuctx)) {
        fprintf(stderr, "gda_example: no CUDA device could be initialised\n");
        return 2;
    }
    if (setup(&c))
        goto out;
    fill_buffers(&c);

    /* the submitting threads' views, in device memory */
    views = calloc(c.nqp, sizeof(*views));
    view_qp = calloc(c.nqp, sizeof(*view_qp));
    nlat = (c.o.mode == GDA_MODE_LATENCY || c.o.mode == GDA_MODE_PINGPONG) ? c.o.n : 0;
    if (!views || !view_qp)
        goto out;
    /* one latency series per pair (its initiating thread's) */
    if (nlat && cu.MemAlloc(&lat_dev, nlat * 8 * c.o.pairs))
        goto out;
    if (c.o.alternate && (cu.MemAlloc(&turn_dev, 8) || cu.MemcpyHtoD(turn_dev, &(uint64_t){0}, 8)))
        goto out;
    for (uint32_t i = 0; i < c.nqp; i++) {
        struct qp_res *r = &c.q[i], *peer = &c.q[i ^ 1];
        if (!r->submits)
            continue;
        struct gda_qp_view *v = &views[nthreads];
        v->sq = (struct gda_sq){.buf = (uint8_t *)(uintptr_t)r->wq.dev, .dbrec = (volatile uint32_t *)(uintptr_t)r->dbr.dev,
                                .db = (volatile uint64_t *)(uintptr_t)r->db, .slots = c.o.slots, .qpn = r->qpn,
                                .db_style = c.o.db_style, .host_queues = (uint32_t)c.o.host_queues,
                                .fenced_dbrec = (uint32_t)c.o.fenced_dbrec};
        if (c.o.dc)
            dc_av_words(&c, peer->dct, &v->sq);
        v->cq = (struct gda_cq){.buf = (uint8_t *)(uintptr_t)r->cq.dev,
                                .dbrec = (volatile uint32_t *)(uintptr_t)(r->dbr.dev + 32), .log_size = r->log_cq};
        v->lkey = r->mr->lkey;
        v->rkey = peer->mr->rkey;
        v->role = i % 2;
        v->lbuf_nic = (uint64_t)(uintptr_t)r->buf;
        v->lbuf = (uint8_t *)(uintptr_t)r->buf_dev;
        v->rbuf_nic = (uint64_t)(uintptr_t)peer->buf;
        if (nlat && v->role == 0)
            v->lat = (uint64_t *)(uintptr_t)(lat_dev + (i / 2) * nlat * 8);
        v->turn = nthreads;
        view_qp[nthreads++] = i;
    }
    struct gda_cfg cfg = {.mode = (uint32_t)c.o.mode, .kinds = c.o.kinds, .n = c.o.n, .batch = c.o.batch,
                          .warmup = c.o.warmup, .lat_kind = c.o.lat_kind, .slots_per_area = c.o.area,
                          .sig_every = c.o.sig_every, .inline_data = (uint32_t)c.o.inline_data,
                          .timeout_ns = (uint64_t)(c.o.timeout_s * 1e9), .gap_ns = (uint64_t)(c.o.gap_us * 1e3),
                          .turns = c.o.alternate ? nthreads : 0,
                          .turn_word = (volatile uint64_t *)(uintptr_t)turn_dev};
    if (cu.MemAlloc(&views_dev, nthreads * sizeof(*views)) || cu.MemAlloc(&cfg_dev, sizeof(cfg)) ||
        cu.MemcpyHtoD(views_dev, views, nthreads * sizeof(*views)) || cu.MemcpyHtoD(cfg_dev, &cfg, sizeof(cfg))) {
        fprintf(stderr, "gda_example: copying the queue views to the device failed\n");
        goto out;
    }
    if (!c.o.quiet)
        fprintf(stderr, "gda_example: %s mode, %u submitting %s thread(s), %u-block queues\n", mode_name(c.o.mode),
                nthreads, gda_backend, c.o.slots);
    if (gda_launch((struct gda_qp_view *)(uintptr_t)views_dev, nthreads, (const struct gda_cfg *)(uintptr_t)cfg_dev,
                   err, sizeof(err))) {
        fprintf(stderr, "gda_example: %s\n", err);
        goto out;
    }
    if (cu.MemcpyDtoH(views, views_dev, nthreads * sizeof(*views))) {
        fprintf(stderr, "gda_example: reading results back failed\n");
        goto out;
    }
    if (nlat) {
        lat = calloc(nlat * c.o.pairs, 8);
        if (!lat || cu.MemcpyDtoH(lat, lat_dev, nlat * 8 * c.o.pairs))
            goto out;
    }

    struct verify v = {0};
    int statuses_ok = 1;
    for (uint32_t t = 0; t < nthreads; t++)
        if (views[t].status != GDA_OK) {
            statuses_ok = 0;
            vfail(&v, "qp 0x%x: %s (CQE opcode 0x%x syndrome 0x%x)", views[t].sq.qpn,
                  views[t].status == GDA_ERR_CQE ? "error completion" : views[t].status == GDA_ERR_TIMEOUT ? "timed out" : "bad configuration",
                  views[t].err_opcode, views[t].err_syndrome);
        }
    if (statuses_ok) {
        if (c.o.mode == GDA_MODE_OPS)
            verify_ops(&c, &v);
        else
            verify_other(&c, &v);
    }

    /* the summary */
    FILE *js = stdout;
    if (c.o.json && !(js = fopen(c.o.json, "w"))) {
        fprintf(stderr, "gda_example: cannot write %s: %s\n", c.o.json, strerror(errno));
        js = stdout;
    }
    fprintf(js, "{\"backend\":\"%s\",\"mode\":\"%s\",\"n\":%" PRIu64 ",\"kinds\":[", gda_backend, mode_name(c.o.mode), c.o.n);
    const char *kn[] = {"write", "read", "fadd", "writev", "mcas", "mfadd", "mcas4", "mfadd4"};
    for (int k = 0, first = 1; k < 8; k++)
        if (c.o.kinds & (1u << k)) {
            fprintf(js, "%s\"%s\"", first ? "" : ",", kn[k]);
            first = 0;
        }
    fprintf(js, "],\"transport\":\"%s\",", c.o.dc ? "dc" : "rc");
    if (c.o.dc)
        fprintf(js, "\"dc_av\":%u,\"dc_key\":%llu,", c.o.dc_av, (unsigned long long)GDA_DC_KEY);
    fprintf(js, "\"batch\":%u,\"slots\":%u,\"area\":%u,\"warmup\":%u,\"db_style\":\"%s\",\"resolve\":\"%s\",\"uar_api\":\"%s\",\"queues\":\"%s\",\"qps\":[",
           c.o.batch, c.o.slots, c.o.area, c.o.warmup, c.o.db_style == GDA_DB_LAST ? "last" : "next",
           c.o.procaddress ? "procaddress" : "dlsym", c.o.uar_runtime ? "runtime" : "driver",
            c.o.host_queues ? "host" : "gpu");
    uint64_t total_wqes = 0, total_db = 0, t0 = UINT64_MAX, t1 = 0, ti = 0;
    for (uint32_t t = 0; t < nthreads; t++) {
        struct gda_qp_view *w = &views[t];
        struct qp_res *r = &c.q[view_qp[t]], *peer = &c.q[view_qp[t] ^ 1];
        fprintf(js, "%s{\"qpn\":%u,\"peer_qpn\":%u,\"role\":%u,\"doorbells\":%" PRIu64 ",\"wqes\":%" PRIu64
               ",\"signaled\":%" PRIu64 ",\"cqes\":%" PRIu64 ",\"pi\":%u,\"lkey\":%u,\"rkey\":%u,\"lbuf\":%" PRIu64
               ",\"rbuf\":%" PRIu64 ",\"uar_reg_addr\":%" PRIu64 ",\"db_dptr\":%" PRIu64 ",\"status\":%" PRIu64,
               t ? "," : "", r->qpn, peer->qpn, w->role, w->doorbells, w->wqes, w->signaled, w->cqes, w->sq.pi, w->lkey,
               w->rkey, w->lbuf_nic, w->rbuf_nic, (uint64_t)(uintptr_t)r->uar->reg_addr, (uint64_t)r->db, w->status);
        if (c.o.dc) /* the DCT this DCI's WQEs name (the peer's) */
            fprintf(js, ",\"dct\":%u", peer->dct->qp_num);
        if (nlat && statuses_ok && c.o.pairs > 1 && w->role == 0) { /* this pair's own series */
            uint64_t *l = lat + (view_qp[t] / 2) * nlat;
            qsort(l, nlat, 8, cmp_u64);
            fprintf(js, ",\"latency_ns\":{\"n\":%" PRIu64 ",\"p50\":%" PRIu64 ",\"p99\":%" PRIu64 "}", nlat,
                    l[nlat / 2], l[(nlat * 99) / 100 < nlat ? (nlat * 99) / 100 : nlat - 1]);
        }
        fprintf(js, "}");
        total_wqes += w->wqes;
        total_db += w->doorbells;
        if (w->t_start && w->t_start < t0)
            t0 = w->t_start;
        if (w->t_end > t1)
            t1 = w->t_end;
        if (w->t_issue > ti)
            ti = w->t_issue;
    }
    fprintf(js, "]");
    if (nlat && statuses_ok) {
        nlat *= c.o.pairs; /* every pair's samples together */
        qsort(lat, nlat, 8, cmp_u64);
        double sum = 0;
        for (uint64_t i = 0; i < nlat; i++)
            sum += (double)lat[i];
        fprintf(js, ",\"latency_ns\":{\"n\":%" PRIu64 ",\"min\":%" PRIu64 ",\"p50\":%" PRIu64 ",\"p99\":%" PRIu64
               ",\"max\":%" PRIu64 ",\"mean\":%.1f}",
               nlat, lat[0], lat[nlat / 2], lat[(nlat * 99) / 100 < nlat ? (nlat * 99) / 100 : nlat - 1], lat[nlat - 1],
               sum / (double)nlat);
    }
    if (statuses_ok && t1 > t0) {
        double secs = (double)(t1 - t0) / 1e9;
        fprintf(js, ",\"seconds\":%.6f,\"wqes_per_s\":%.1f,\"doorbells_per_s\":%.1f", secs, (double)total_wqes / secs,
               (double)total_db / secs);
        if (ti > t0) /* rate mode: the submitting threads' own pace, without the final drain */
            fprintf(js, ",\"issue_seconds\":%.6f,\"issue_doorbells_per_s\":%.1f", (double)(ti - t0) / 1e9,
                    (double)total_db * 1e9 / (double)(ti - t0));
    }
    fprintf(js, ",\"verify\":{\"ok\":%s,\"checked\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"errors\":[",
           v.failed ? "false" : "true", v.checked, v.failed);
    for (uint64_t i = 0; i < v.failed && i < 8; i++)
        fprintf(js, "%s\"%s\"", i ? "," : "", v.first[i]);
    fprintf(js, "]}}\n");
    if (js != stdout)
        fclose(js);
    fflush(stdout);
    if (!c.o.quiet && v.failed)
        fprintf(stderr, "gda_example: %" PRIu64 " check(s) failed, first: %s\n", v.failed, v.first[0]);
    rc = v.failed ? 1 : 0;
out:
    free(lat);
    if (lat_dev)
        cu.MemFree(lat_dev);
    if (turn_dev)
        cu.MemFree(turn_dev);
    if (views_dev)
        cu.MemFree(views_dev);
    if (cfg_dev)
        cu.MemFree(cfg_dev);
    free(views);
    free(view_qp);
    if (c.o.linger_s > 0) {
        struct timespec ts = {(time_t)c.o.linger_s, (long)((c.o.linger_s - (time_t)c.o.linger_s) * 1e9)};
        nanosleep(&ts, NULL);
    }
    teardown(&c);
    return rc;
}
