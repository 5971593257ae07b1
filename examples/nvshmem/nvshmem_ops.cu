// nvshmem_ops.cu: the four NVSHMEM operations of the SigmaTrace paper's doorbell benchmarks
// (put + quiet, get, atomic fetch-add, ping-pong), each in a persistent single-thread kernel:
// warm-up then measured iterations, every iteration timed with the GPU's globaltimer and its
// result checked.  Two PEs (or more: PE 0 and PE 1 do the work, others wait).  PE 0 initiates
// put, get and fetch-add towards PE 1; ping-pong runs a kernel on both.  Prints one JSON line
// per PE with what it issued, so a trace can be compared with the program.
//
// Bootstrap without MPI: NVSHMEM's unique-id mode.  PE 0 writes the id to --uid-file, the others
// read it from there; rank and size come from RANK / WORLD_SIZE (or Open MPI's, PMI's variables).
// Between phases the PEs meet through files in the same folder (not nvshmem_barrier_all), so that
// the only network traffic between them besides NVSHMEM's own start and end is the operations.
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "nvshmem_ops: %s: %s\n", #call, cudaGetErrorString(e_));          \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)

enum op_kind { OP_PUT, OP_GET, OP_FADD, OP_PINGPONG, N_OPS };
static const char *const op_names[N_OPS] = {"put", "get", "fadd", "pingpong"};
static const uint64_t PATTERN = 0x5157000000000000ull;   // high bits of every word written

struct cfg {
    int warmup = 1000, iters = 5000;
    size_t bytes = 8;
    bool amo_signal = false;
    bool ops[N_OPS] = {true, true, true, true};
    std::string uid_file, json;
};

__device__ __forceinline__ uint64_t globaltimer()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// PE 0: put `bytes` (iteration number in every word) and wait for it to complete.
__global__ void k_put(uint64_t *dst, uint64_t *src, size_t words, int peer, int total, int warmup,
                      uint64_t *lat)
{
    for (int i = 0; i < total; i++) {
        for (size_t w = 0; w < words; w++)
            src[w] = PATTERN | ((uint64_t)i << 16) | w;
        uint64_t t0 = globaltimer();
        nvshmem_putmem(dst, src, words * 8, peer);
        nvshmem_quiet();
        uint64_t t1 = globaltimer();
        if (i >= warmup)
            lat[i - warmup] = t1 - t0;
    }
}

// PE 0: get the peer's buffer (filled with a known pattern) and check every word.
__global__ void k_get(uint64_t *dst, const uint64_t *src, size_t words, int peer, int total, int warmup,
                      uint64_t *lat, unsigned long long *bad)
{
    for (int i = 0; i < total; i++) {
        for (size_t w = 0; w < words; w++)
            dst[w] = 0;
        uint64_t t0 = globaltimer();
        nvshmem_getmem(dst, src, words * 8, peer);
        uint64_t t1 = globaltimer();
        if (i >= warmup)
            lat[i - warmup] = t1 - t0;
        for (size_t w = 0; w < words; w++)
            if (dst[w] != (PATTERN | 0xffffull << 16 | w))
                (*bad)++;
    }
}

// PE 0: fetch-add 1 on the peer's counter; each fetched value must be the iteration number.
// With `signal`, the add goes as nvshmemx_signal_op(SIGNAL_ADD) + quiet, whose result is not
// returned to the GPU: NVSHMEM's IBRC transport performs fetching atomics only with GDRCopy,
// but posts this one as the NIC's own fetch-and-add.  The total is checked at the target.
__global__ void k_fadd(uint64_t *ctr, int peer, int total, int warmup, uint64_t *lat, unsigned long long *bad,
                       bool signal)
{
    for (int i = 0; i < total; i++) {
        uint64_t t0 = globaltimer(), old = (uint64_t)i;
        if (signal) {
            nvshmemx_signal_op(ctr, 1, NVSHMEM_SIGNAL_ADD, peer);
            nvshmem_quiet();
        } else {
            old = nvshmem_uint64_atomic_fetch_add(ctr, 1, peer);
        }
        uint64_t t1 = globaltimer();
        if (i >= warmup)
            lat[i - warmup] = t1 - t0;
        if (old != (uint64_t)i)
            (*bad)++;
    }
}

// Both PEs: PE 0 puts i+1 into the peer's flag and waits for the same value back in its own.
__global__ void k_pingpong(uint64_t *flag, int me, int peer, int total, int warmup, uint64_t *lat)
{
    for (int i = 0; i < total; i++) {
        uint64_t v = (uint64_t)i + 1;
        if (me == 0) {
            uint64_t t0 = globaltimer();
            nvshmem_uint64_p(flag, v, peer);
            nvshmem_uint64_wait_until(flag, NVSHMEM_CMP_EQ, v);
            uint64_t t1 = globaltimer();
            if (i >= warmup)
                lat[i - warmup] = t1 - t0;
        } else {
            nvshmem_uint64_wait_until(flag, NVSHMEM_CMP_EQ, v);
            nvshmem_uint64_p(flag, v, peer);
        }
    }
    nvshmem_quiet();
}

// The PEs meet at named points through files next to the unique id: rank r creates NAME.r and
// waits until every rank's file exists.
static void meet(const cfg &c, const char *name, int me, int npes)
{
    std::string base = c.uid_file + "." + name;
    FILE *f = fopen((base + "." + std::to_string(me)).c_str(), "w");
    if (!f) {
        fprintf(stderr, "nvshmem_ops: cannot write %s: %s\n", base.c_str(), strerror(errno));
        exit(2);
    }
    fclose(f);
    for (int r = 0, waited = 0; r < npes; r++)
        while (access((base + "." + std::to_string(r)).c_str(), F_OK) != 0) {
            if (++waited > 300000) {        // five minutes: a PE that died never comes
                fprintf(stderr, "nvshmem_ops: PE %d never reached '%s'\n", r, name);
                exit(2);
            }
            usleep(1000);
        }
}

static void share_uid(const cfg &c, int me, nvshmemx_uniqueid_t *id)
{
    if (me == 0) {
        if (nvshmemx_get_uniqueid(id) != 0) {
            fprintf(stderr, "nvshmem_ops: nvshmemx_get_uniqueid failed\n");
            exit(2);
        }
        std::string tmp = c.uid_file + ".tmp";
        FILE *f = fopen(tmp.c_str(), "wb");
        if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp.c_str(), c.uid_file.c_str()) != 0) {
            fprintf(stderr, "nvshmem_ops: cannot write %s: %s\n", c.uid_file.c_str(), strerror(errno));
            exit(2);
        }
        return;
    }
    for (int tries = 0; tries < 120000; tries++) {      // two minutes
        FILE *f = fopen(c.uid_file.c_str(), "rb");
        if (f) {
            size_t got = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (got == 1)
                return;
        }
        usleep(1000);
    }
    fprintf(stderr, "nvshmem_ops: no unique id appeared in %s\n", c.uid_file.c_str());
    exit(2);
}

static int env_int(const char *const names[], int fallback)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return atoi(v);
    }
    return fallback;
}

struct stats {
    double p50, p99, mean;
    uint64_t min, max;
};

static stats summarize(std::vector<uint64_t> v)
{
    stats s{};
    if (v.empty())
        return s;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (uint64_t x : v)
        sum += (double)x;
    s.mean = sum / v.size();
    s.p50 = (double)v[(v.size() - 1) / 2];
    s.p99 = (double)v[std::min(v.size() - 1, (size_t)((v.size() - 1) * 0.99 + 0.5))];
    s.min = v.front();
    s.max = v.back();
    return s;
}

static void usage()
{
    fprintf(stderr,
            "usage: nvshmem_ops --uid-file PATH [--ops put,get,fadd,pingpong|none] [-n ITERS] [--warmup N]\n"
            "                   [--bytes N] [--amo fetch|signal] [--json PATH]\n"
            "  Rank and size from RANK/WORLD_SIZE (or OMPI_COMM_WORLD_*, PMI_*); two PEs or more.\n");
    exit(2);
}

static cfg parse(int argc, char **argv)
{
    cfg c;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> const char * {
            if (i + 1 >= argc)
                usage();
            return argv[++i];
        };
        if (a == "-n")
            c.iters = atoi(next());
        else if (a == "--warmup")
            c.warmup = atoi(next());
        else if (a == "--bytes")
            c.bytes = strtoull(next(), nullptr, 0);
        else if (a == "--uid-file")
            c.uid_file = next();
        else if (a == "--json")
            c.json = next();
        else if (a == "--amo") {
            std::string m = next();
            if (m != "fetch" && m != "signal")
                usage();
            c.amo_signal = m == "signal";
        }
        else if (a == "--ops") {
            std::string list = next();
            std::fill(c.ops, c.ops + N_OPS, false);
            size_t pos = 0;
            while (pos <= list.size()) {
                size_t end = list.find(',', pos);
                std::string name = list.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
                bool known = name == "none";
                for (int k = 0; k < N_OPS; k++)
                    if (name == op_names[k])
                        c.ops[k] = known = true;
                if (!known) {
                    fprintf(stderr, "nvshmem_ops: unknown operation '%s'\n", name.c_str());
                    usage();
                }
                if (end == std::string::npos)
                    break;
                pos = end + 1;
            }
        } else
            usage();
    }
    if (c.uid_file.empty() || c.iters < 1 || c.warmup < 0 || c.bytes < 8 || c.bytes % 8 || c.bytes > (1 << 20))
        usage();
    return c;
}

int main(int argc, char **argv)
{
    cfg c = parse(argc, argv);
    static const char *const rank_vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", nullptr};
    static const char *const size_vars[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", nullptr};
    int me = env_int(rank_vars, -1), npes = env_int(size_vars, -1);
    if (me < 0 || npes < 2 || me >= npes) {
        fprintf(stderr, "nvshmem_ops: needs RANK and WORLD_SIZE (two PEs or more)\n");
        return 2;
    }
    // NVSHMEM takes the current context: make one first.
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
    share_uid(c, me, &id);
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    if (nvshmemx_set_attr_uniqueid_args(me, npes, &id, &attr) != 0 ||
        nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
        fprintf(stderr, "nvshmem_ops: NVSHMEM initialisation failed\n");
        return 2;
    }
    if (nvshmem_my_pe() != me || nvshmem_n_pes() != npes) {
        fprintf(stderr, "nvshmem_ops: NVSHMEM says PE %d of %d, the environment %d of %d\n", nvshmem_my_pe(),
                nvshmem_n_pes(), me, npes);
        return 2;
    }
    const int peer = me == 0 ? 1 : 0, total = c.warmup + c.iters;
    const size_t words = c.bytes / 8;
    // Symmetric: the buffer puts land in and gets read, the counter, the ping-pong flag, and the
    // local side of puts and gets (the proxy transports reach only symmetric or registered memory).
    uint64_t *buf = (uint64_t *)nvshmem_malloc(c.bytes);
    uint64_t *ctr = (uint64_t *)nvshmem_malloc(8);
    uint64_t *flag = (uint64_t *)nvshmem_malloc(8);
    uint64_t *local = (uint64_t *)nvshmem_malloc(c.bytes);
    uint64_t *lat = nullptr;
    unsigned long long *bad = nullptr;
    if (!buf || !ctr || !flag || !local) {
        fprintf(stderr, "nvshmem_ops: nvshmem_malloc failed\n");
        return 2;
    }
    CK(cudaMalloc(&lat, sizeof(uint64_t) * c.iters));
    CK(cudaMalloc(&bad, sizeof(*bad)));
    CK(cudaMemset(ctr, 0, 8));
    CK(cudaMemset(flag, 0, 8));
    {   // the pattern gets read back on PE 1
        std::vector<uint64_t> pat(words);
        for (size_t w = 0; w < words; w++)
            pat[w] = PATTERN | 0xffffull << 16 | w;
        CK(cudaMemcpy(buf, pat.data(), c.bytes, cudaMemcpyHostToDevice));
    }
    CK(cudaDeviceSynchronize());
    // A stream that does not wait for the legacy default stream: a NIC emulated with driver
    // copies into GPU memory must be able to copy while the kernel runs.
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const bool works = me < 2;       // PEs beyond the second only take part in start and end
    std::string out = "{\"pe\":" + std::to_string(me) + ",\"npes\":" + std::to_string(npes) +
                      ",\"warmup\":" + std::to_string(c.warmup) + ",\"iters\":" + std::to_string(c.iters) +
                      ",\"bytes\":" + std::to_string(c.bytes) + ",\"amo\":\"" + (c.amo_signal ? "signal" : "fetch") +
                      "\",\"ops\":{";
    int errors = 0;
    bool first = true;
    meet(c, "start", me, npes);
    // get reads PE 1's pattern and put overwrites it: get runs first.
    const int order[N_OPS] = {OP_GET, OP_PUT, OP_FADD, OP_PINGPONG};
    for (int oi = 0; oi < N_OPS; oi++) {
        const int k = order[oi];
        if (!c.ops[k])
            continue;
        const bool initiates = me == 0 || (k == OP_PINGPONG && me == 1);
        CK(cudaMemset(bad, 0, sizeof(*bad)));
        CK(cudaDeviceSynchronize());
        meet(c, (std::string(op_names[k]) + "-go").c_str(), me, npes);
        struct timespec w0, w1;
        clock_gettime(CLOCK_MONOTONIC, &w0);
        if (works && initiates) {
            switch (k) {
            case OP_PUT: k_put<<<1, 1, 0, st>>>(buf, local, words, peer, total, c.warmup, lat); break;
            case OP_GET: k_get<<<1, 1, 0, st>>>(local, buf, words, peer, total, c.warmup, lat, bad); break;
            case OP_FADD: k_fadd<<<1, 1, 0, st>>>(ctr, peer, total, c.warmup, lat, bad, c.amo_signal); break;
            case OP_PINGPONG: k_pingpong<<<1, 1, 0, st>>>(flag, me, peer, total, c.warmup, lat); break;
            }
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(st));
        }
        clock_gettime(CLOCK_MONOTONIC, &w1);
        meet(c, (std::string(op_names[k]) + "-done").c_str(), me, npes);
        // What arrived at the target (PE 1), checked there.
        unsigned long long nbad = 0;
        CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
        if (me == 1 && k == OP_PUT) {
            std::vector<uint64_t> got(words);
            CK(cudaMemcpy(got.data(), buf, c.bytes, cudaMemcpyDeviceToHost));
            for (size_t w = 0; w < words; w++)
                nbad += got[w] != (PATTERN | (uint64_t)(total - 1) << 16 | w);
        }
        if (me == 1 && k == OP_FADD) {
            uint64_t v = 0;
            CK(cudaMemcpy(&v, ctr, 8, cudaMemcpyDeviceToHost));
            nbad += v != (uint64_t)total;
        }
        if (k == OP_PINGPONG && works) {
            uint64_t v = 0;
            CK(cudaMemcpy(&v, flag, 8, cudaMemcpyDeviceToHost));
            nbad += v != (uint64_t)total;
        }
        errors += nbad != 0;
        // What this PE issued to the network: count, bytes, by kind.
        const bool issues = works && (me == 0 || k == OP_PINGPONG);
        long long n = issues ? total : 0;
        char line[512];
        std::string tail;
        if (me == 0 && works) {
            std::vector<uint64_t> h(c.iters);
            CK(cudaMemcpy(h.data(), lat, sizeof(uint64_t) * c.iters, cudaMemcpyDeviceToHost));
            stats s = summarize(h);
            snprintf(line, sizeof line, ",\"p50_ns\":%.0f,\"p99_ns\":%.0f,\"mean_ns\":%.1f,\"min_ns\":%llu,\"max_ns\":%llu",
                     s.p50, s.p99, s.mean, (unsigned long long)s.min, (unsigned long long)s.max);
            tail = line;
        }
        const size_t op_bytes = k == OP_FADD || k == OP_PINGPONG ? 8 : c.bytes;
        snprintf(line, sizeof line, "%s\"%s\":{\"issued\":%lld,\"measured\":%d,\"bytes_each\":%zu,\"errors\":%llu,\"wall_s\":%.6f",
                 first ? "" : ",", op_names[k], n, issues ? c.iters : 0, op_bytes, nbad,
                 (w1.tv_sec - w0.tv_sec) + (w1.tv_nsec - w0.tv_nsec) * 1e-9);
        out += line + tail + "}";
        first = false;
    }
    out += "},\"errors\":" + std::to_string(errors) + "}";
    meet(c, "end", me, npes);
    nvshmem_free(local);
    nvshmem_free(flag);
    nvshmem_free(ctr);
    nvshmem_free(buf);
    nvshmem_finalize();
    if (c.json.empty())
        printf("%s\n", out.c_str());
    else {
        FILE *f = fopen(c.json.c_str(), "w");
        if (!f || fprintf(f, "%s\n", out.c_str()) < 0 || fclose(f) != 0) {
            fprintf(stderr, "nvshmem_ops: cannot write %s\n", c.json.c_str());
            return 2;
        }
    }
    return errors ? 1 : 0;
}
