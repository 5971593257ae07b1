/* The emulated NIC's CUDA I/O-memory bridge: an rtld audit module (LD_AUDIT, rtld-audit(7)).
 *
 * On a ConnectX the UAR is a mapping of the NIC's BAR, and GPU libraries (NVSHMEM's IBGDA)
 * register it for the GPU with cuMemHostRegister(IOMEMORY | DEVICEMAP | PORTABLE), which the
 * driver accepts for I/O memory.  The emulated NIC's UAR is a shared page of a memfd named
 * "simnic-uar" (mlx5_dev.c, sn_uar_alloc): ordinary memory, which the driver refuses as I/O
 * memory (CUDA_ERROR_INVALID_VALUE).  What I/O memory gives on hardware -- the GPU's stores reach
 * the page -- is, for host memory, a device-mapped registration; so on such a page this module
 * asks the driver for that (IOMEMORY cleared, DEVICEMAP set).  Every other registration reaches
 * the driver unchanged, and so does everything else.
 *
 * Programs find the driver with dlsym (the CUDA runtime, linked statically, dlsym()s
 * cuGetProcAddress and gets every other entry point from it) or by linking it.  An audit module
 * sees both: la_symbind64 is called for dlsym results and for the PLT bindings of objects that
 * link libcuda.so.1.  It hands out its wrappers for cuMemHostRegister(_v2) and for
 * cuGetProcAddress(_v2), whose wrappers do the same for what they return.
 *
 * Since dlsym gives the wrappers for those exports, a tool that hooks the driver's exports found
 * with dlsym (sigmatrace's tracer) hooks the wrappers: it sees the program's call first, as
 * without this module.
 *
 * The module runs in the audit namespace with a libc of its own: it allocates nothing, reads
 * /proc/self/maps into a stack buffer, and on any error of its own calls the driver unchanged.
 */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define REGISTER_DEVICEMAP 0x02u
#define REGISTER_IOMEMORY 0x04u
#define UAR_MAPPING "/memfd:simnic-uar"

typedef int CUresult;
typedef CUresult (*register_fn)(void *p, size_t bytesize, unsigned int flags);
typedef CUresult (*getproc_v2_fn)(const char *symbol, void **pfn, int cuda_version, unsigned long long flags,
                                  int *symbol_status);
typedef CUresult (*getproc_fn)(const char *symbol, void **pfn, int cuda_version, unsigned long long flags);

/* The driver's functions behind each wrapper (any implementation of the ABI will do: the export
 * or the entry point cuGetProcAddress hands out). */
static register_fn real_register_v2, real_register;
static getproc_v2_fn real_getproc_v2;
static getproc_fn real_getproc;

#define LOAD(slot) __atomic_load_n(&(slot), __ATOMIC_ACQUIRE)
#define STORE(slot, fn) __atomic_store_n(&(slot), (fn), __ATOMIC_RELEASE)

/* ---- is the range inside an emulated UAR page? ---------------------------------------------- */

static int hex_field(const char **s, uintptr_t *out)
{
    uintptr_t v = 0;
    int n = 0;
    for (;; (*s)++, n++) {
        char c = **s;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return n ? 0 : -1;
        v = v << 4 | (uintptr_t)d;
        *out = v;
    }
}

/* One line of /proc/self/maps ("start-end perms offset dev inode   path", no newline): does its
 * mapping hold [lo, hi) and is it an emulated UAR? */
static int line_is_uar_holding(const char *line, uintptr_t lo, uintptr_t hi)
{
    uintptr_t start = 0, end = 0;
    const char *s = line;
    if (hex_field(&s, &start) || *s++ != '-' || hex_field(&s, &end))
        return 0;
    if (lo < start || hi > end)
        return 0;
    for (int field = 0; field < 4; field++) { /* perms, offset, dev, inode */
        while (*s == ' ')
            s++;
        while (*s && *s != ' ')
            s++;
    }
    while (*s == ' ')
        s++;
    size_t n = strlen(UAR_MAPPING);
    return !strncmp(s, UAR_MAPPING, n) && (!s[n] || !strcmp(s + n, " (deleted)"));
}

/* 1 if [p, p + size) lies inside one mapping of an emulated UAR, else 0 (also on any error). */
static int range_is_uar(const void *p, size_t size)
{
    uintptr_t lo = (uintptr_t)p, hi = lo + size;
    if (!p || !size || hi < lo)
        return 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[4096], line[512];
    size_t len = 0;     /* bytes of the current line in `line` */
    int too_long = 0;   /* the current line did not fit: it names no UAR (whose line is short) */
    int found = 0;
    ssize_t got;
    while (!found && (got = read(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < got && !found; i++) {
            if (buf[i] != '\n') {
                if (len < sizeof(line) - 1)
                    line[len++] = buf[i];
                else
                    too_long = 1;
                continue;
            }
            line[len] = 0;
            found = !too_long && line_is_uar_holding(line, lo, hi);
            len = 0;
            too_long = 0;
        }
    }
    close(fd);
    return found;
}

static void note_granted(const void *p)
{
    const char *d = getenv("SIMNIC_DEBUG");
    if (!d || atoi(d) <= 0)
        return;
    char msg[160];
    int n = snprintf(msg, sizeof(msg),
                     "simnic: cuMemHostRegister of UAR %p: I/O memory granted as device-mapped host memory\n", p);
    if (n > 0 && write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1) < 0)
        return;
}

/* ---- the wrappers --------------------------------------------------------------------------- */

static CUresult do_register(register_fn real, void *p, size_t size, unsigned int flags)
{
    if ((flags & REGISTER_IOMEMORY) && range_is_uar(p, size)) {
        note_granted(p);
        flags = (flags & ~REGISTER_IOMEMORY) | REGISTER_DEVICEMAP;
    }
    return real(p, size, flags);
}

static CUresult wrap_register_v2(void *p, size_t size, unsigned int flags)
{
    return do_register(LOAD(real_register_v2), p, size, flags);
}

static CUresult wrap_register(void *p, size_t size, unsigned int flags)
{
    return do_register(LOAD(real_register), p, size, flags);
}

static CUresult wrap_getproc_v2(const char *symbol, void **pfn, int cuda_version, unsigned long long flags,
                                int *symbol_status);
static CUresult wrap_getproc(const char *symbol, void **pfn, int cuda_version, unsigned long long flags);

/* What cuGetProcAddress returned for SYMBOL at CUDA_VERSION: our wrapper where it is one of the
 * functions we stand in for (the driver's pointer kept for the wrapper to call), else FN.  The
 * ABI a name gets follows cuda.h: cuMemHostRegister is _v2 from 6.5, cuGetProcAddress from 12.0. */
static void *swap_proc(const char *symbol, void *fn, int cuda_version)
{
    /* (one of ours already: a layer below handed it back; kept, never called by itself) */
    if (!fn || !symbol || fn == (void *)wrap_register_v2 || fn == (void *)wrap_register ||
        fn == (void *)wrap_getproc_v2 || fn == (void *)wrap_getproc)
        return fn;
    if (!strcmp(symbol, "cuMemHostRegister")) {
        if (cuda_version >= 6050) {
            STORE(real_register_v2, (register_fn)fn);
            return (void *)wrap_register_v2;
        }
        STORE(real_register, (register_fn)fn);
        return (void *)wrap_register;
    }
    if (!strcmp(symbol, "cuGetProcAddress")) {
        if (cuda_version >= 12000) {
            STORE(real_getproc_v2, (getproc_v2_fn)fn);
            return (void *)wrap_getproc_v2;
        }
        STORE(real_getproc, (getproc_fn)fn);
        return (void *)wrap_getproc;
    }
    return fn;
}

static CUresult wrap_getproc_v2(const char *symbol, void **pfn, int cuda_version, unsigned long long flags,
                                int *symbol_status)
{
    CUresult r = LOAD(real_getproc_v2)(symbol, pfn, cuda_version, flags, symbol_status);
    if (r == 0 && pfn)
        *pfn = swap_proc(symbol, *pfn, cuda_version);
    return r;
}

static CUresult wrap_getproc(const char *symbol, void **pfn, int cuda_version, unsigned long long flags)
{
    CUresult r = LOAD(real_getproc)(symbol, pfn, cuda_version, flags);
    if (r == 0 && pfn)
        *pfn = swap_proc(symbol, *pfn, cuda_version);
    return r;
}

/* ---- the audit interface -------------------------------------------------------------------- */

EXPORT unsigned int la_version(unsigned int version)
{
    return version < LAV_CURRENT ? version : LAV_CURRENT;
}

static int is_cuda_driver(const char *path)
{
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path;
    return base && !strncmp(base, "libcuda.so", strlen("libcuda.so"));
}

/* Does the object link the driver (a DT_NEEDED entry libcuda.so*)?  Its PLT bindings to the
 * driver are then audited too; every other object is left alone. */
static int links_cuda_driver(const struct link_map *map)
{
    const ElfW(Dyn) *dyn = map->l_ld;
    const char *strtab = NULL;
    if (!dyn)
        return 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_STRTAB)
            strtab = (const char *)d->d_un.d_ptr;
    if (!strtab)
        return 0;
    /* the loader has relocated the dynamic section's addresses by now, except where it is
     * read-only; an address below the load base is still file-relative */
    if ((uintptr_t)strtab < map->l_addr)
        strtab += map->l_addr;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_NEEDED && is_cuda_driver(strtab + d->d_un.d_val))
            return 1;
    return 0;
}

/* The driver's cookie is its link_map's address (the loader's default) with the low bit set:
 * la_symbind64 then swaps only symbols that the driver defines. */
#define DRIVER_MARK 1u

EXPORT unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
    if (is_cuda_driver(map->l_name)) {
        *cookie = (uintptr_t)map | DRIVER_MARK;
        return LA_FLG_BINDTO;
    }
    return links_cuda_driver(map) ? LA_FLG_BINDFROM : 0;
}

EXPORT uintptr_t la_symbind64(Elf64_Sym *sym, unsigned int ndx, uintptr_t *refcook, uintptr_t *defcook,
                              unsigned int *flags, const char *symname)
{
    void *fn = (void *)(uintptr_t)sym->st_value;
    if (!defcook || !(*defcook & DRIVER_MARK) || !symname || !fn)
        return sym->st_value;
    if (!strcmp(symname, "cuMemHostRegister_v2")) {
        STORE(real_register_v2, (register_fn)fn);
        return (uintptr_t)wrap_register_v2;
    }
    if (!strcmp(symname, "cuMemHostRegister")) {
        STORE(real_register, (register_fn)fn);
        return (uintptr_t)wrap_register;
    }
    if (!strcmp(symname, "cuGetProcAddress_v2")) {
        STORE(real_getproc_v2, (getproc_v2_fn)fn);
        return (uintptr_t)wrap_getproc_v2;
    }
    if (!strcmp(symname, "cuGetProcAddress")) {
        STORE(real_getproc, (getproc_fn)fn);
        return (uintptr_t)wrap_getproc;
    }
    return sym->st_value;
}
