/* The live block: live.bin mapped MAP_SHARED, updated in place (layout: sigmatrace/live.h).
 *
 * When a session ends the file is unmapped from the process (its pages and, for a deleted trace,
 * its disk space are freed), but its address range is not: the same range is remapped with
 * private anonymous memory, because something may still write a counter there (a thread that
 * was inside a hook when tracing stopped, and repeaters, which keep forwarding and counting for
 * the life of the process with slot pointers taken in their session).  Those writes land in
 * memory nobody reads.  A range that no repeater holds is reused for the next session's file,
 * so attach/detach cycles do not add mappings; one a repeater holds stays reserved (3 MiB of
 * address space, resident only where it is written). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rt.h"

#define QP_HASH 2048 /* power of two, > 2 * ST_LIVE_MAX_QPS */

static pthread_mutex_t st_live_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t st_qp_hash[QP_HASH]; /* slot index + 1, 0 = empty; published last */
static void *st_live_spare;          /* an ended session's range that nothing holds, or NULL */
static int st_live_held;             /* this session's block has slots that outlive it */

void st_live_hold(void) { __atomic_store_n(&st_live_held, 1, __ATOMIC_RELAXED); }

int st_live_open(const char *dir, int mode, int doorbells, int attached)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/live.bin", dir);
    int fd = st_create_file(st_dir_fd(), "live.bin", O_RDWR);
    if (fd < 0) {
        st_error("live", "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    if (ftruncate(fd, ST_LIVE_FILE_SIZE) != 0) {
        st_error("live", "cannot size %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    /* over the spare range atomically (MAP_FIXED replaces it): it is never unmapped */
    void *spare = st_live_spare;
    void *m = mmap(spare, ST_LIVE_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | (spare ? MAP_FIXED : 0), fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        st_error("live", "cannot map %s: %s", path, strerror(errno));
        return -1;
    }
    st_live_spare = NULL;
    st_live_held = 0;
    struct st_live_header *h = m;
    memcpy(h->magic, ST_LIVE_MAGIC, 8);
    h->version = ST_LIVE_VERSION;
    h->header_size = ST_LIVE_HEADER_SIZE;
    h->file_size = ST_LIVE_FILE_SIZE;
    h->pid = (uint32_t)getpid();
    h->mode = (uint32_t)mode;
    h->state = ST_STATE_INIT;
    h->doorbell_mode = (uint32_t)doorbells;
    h->thread_offset = ST_LIVE_THREAD_OFFSET;
    h->thread_size = ST_LIVE_THREAD_SIZE;
    h->qp_offset = ST_LIVE_QP_OFFSET;
    h->qp_size = ST_LIVE_QP_SIZE;
    h->repeater_offset = ST_LIVE_REPEATER_OFFSET;
    h->repeater_size = ST_LIVE_REPEATER_SIZE;
    h->max_threads = ST_LIVE_MAX_THREADS;
    h->max_qps = ST_LIVE_MAX_QPS;
    h->max_repeaters = ST_LIVE_MAX_REPEATERS;
    h->coverage = ST_COV_REQUESTED | ST_COV_AGENT_LOADED;
    memset(st_qp_hash, 0, sizeof(st_qp_hash));
    __atomic_store_n(&st_g.live, h, __ATOMIC_RELEASE);
    return 0;
}

void st_live_close(int state)
{
    struct st_live_header *h = st_g.live;
    if (!h)
        return;
    struct st_calib c;
    st_calib_take(&c);
    h->end_tsc = c.tsc;
    h->end_mono_ns = c.mono_ns;
    h->end_real_ns = c.real_ns;
    if (c.mono_ns > h->start_mono_ns && c.tsc > h->start_tsc)
        h->tsc_hz = (double)(c.tsc - h->start_tsc) * 1e9 / (double)(c.mono_ns - h->start_mono_ns);
    h->state = (uint32_t)state;
    msync(h, ST_LIVE_FILE_SIZE, MS_ASYNC);
    /* No one new finds the block; whoever still holds a pointer writes into anonymous memory. */
    __atomic_store_n(&st_g.live, NULL, __ATOMIC_RELEASE);
    void *scrap = mmap(h, ST_LIVE_FILE_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (scrap == MAP_FAILED) {
        /* the file stays mapped (as before this was done): never unmap what may be written */
        st_error("live", "cannot release live.bin's mapping: %s", strerror(errno));
        return;
    }
    if (!__atomic_load_n(&st_live_held, __ATOMIC_RELAXED))
        st_live_spare = scrap;
}

void st_live_forget(void)
{
    struct st_live_header *h = st_g.live;
    if (!h)
        return;
    /* Keep the addresses valid (pointers to slots may be held) but stop sharing the parent's
     * file: the range becomes scrap, as at the end of a session. */
    __atomic_store_n(&st_g.live, NULL, __ATOMIC_RELEASE);
    void *scrap = mmap(h, ST_LIVE_FILE_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (scrap != MAP_FAILED && !st_live_held)
        st_live_spare = scrap;
}

void st_coverage(uint64_t bits)
{
    struct st_live_header *h = st_g.live;
    if (h && (h->coverage & bits) != bits)
        __atomic_fetch_or(&h->coverage, bits, __ATOMIC_RELAXED);
}

/* Functions below load st_g.live once: it becomes NULL when a session ends. */
static struct st_live_qp *st_qp_at(struct st_live_header *h, uint32_t i)
{
    return (struct st_live_qp *)((char *)h + ST_LIVE_QP_OFFSET + (size_t)i * ST_LIVE_QP_SIZE);
}

static uint32_t st_qp_hash_of(uint32_t qpn) { return (qpn * 2654435761u) & (QP_HASH - 1); }

static struct st_live_qp *st_qp_find(struct st_live_header *h, uint32_t qpn, uint32_t *free_pos)
{
    for (uint32_t n = 0, i = st_qp_hash_of(qpn); n < QP_HASH; n++, i = (i + 1) & (QP_HASH - 1)) {
        uint32_t v = __atomic_load_n(&st_qp_hash[i], __ATOMIC_ACQUIRE);
        if (!v) {
            if (free_pos)
                *free_pos = i;
            return NULL;
        }
        if (st_qp_at(h, v - 1)->qpn == qpn)
            return st_qp_at(h, v - 1);
    }
    return NULL;
}

struct st_live_qp *st_live_qp(uint32_t qpn, int create, uint32_t flags)
{
    struct st_live_header *h = __atomic_load_n(&st_g.live, __ATOMIC_ACQUIRE);
    if (!h)
        return NULL;
    struct st_live_qp *q = st_qp_find(h, qpn, NULL);
    if (q || !create) {
        if (q && (q->flags & flags) != flags)
            __atomic_fetch_or(&q->flags, flags, __ATOMIC_RELAXED);
        return q;
    }
    pthread_mutex_lock(&st_live_lock);
    uint32_t pos = UINT32_MAX;
    q = st_qp_find(h, qpn, &pos);
    if (!q && pos != UINT32_MAX && h->n_qps < ST_LIVE_MAX_QPS) {
        uint32_t i = h->n_qps;
        q = st_qp_at(h, i);
        memset(q, 0, sizeof(*q));
        q->qpn = qpn;
        q->flags = flags;
        q->repeater = UINT32_MAX;
        q->gpu = -1;
        q->remote_qpn = UINT32_MAX;
        __atomic_store_n(&st_qp_hash[pos], i + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&h->n_qps, i + 1, __ATOMIC_RELEASE);
    } else if (!q) {
        static int warned;
        if (!warned++)
            st_error("live", "live QP table full (%d QPs): later QPs have no live counters", ST_LIVE_MAX_QPS);
    } else if ((q->flags & flags) != flags) {
        __atomic_fetch_or(&q->flags, flags, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&st_live_lock);
    return q;
}

static struct st_live_repeater *st_repeater_at(struct st_live_header *h, int index)
{
    return (struct st_live_repeater *)((char *)h + ST_LIVE_REPEATER_OFFSET + (size_t)index * ST_LIVE_REPEATER_SIZE);
}

int st_live_repeater_alloc(void)
{
    struct st_live_header *h = __atomic_load_n(&st_g.live, __ATOMIC_ACQUIRE);
    if (!h)
        return -1;
    pthread_mutex_lock(&st_live_lock);
    int i = -1;
    if (h->n_repeaters < ST_LIVE_MAX_REPEATERS) {
        i = (int)h->n_repeaters;
        struct st_live_repeater *r = st_repeater_at(h, i);
        memset(r, 0, sizeof(*r));
        r->cpu = -1;
        __atomic_store_n(&h->n_repeaters, (uint32_t)i + 1, __ATOMIC_RELEASE);
        st_live_hold(); /* a repeater keeps its slot for the life of the process */
    }
    pthread_mutex_unlock(&st_live_lock);
    if (i < 0)
        st_error("live", "live repeater table full (%d)", ST_LIVE_MAX_REPEATERS);
    return i;
}

struct st_live_repeater *st_live_repeater(int index)
{
    struct st_live_header *h = __atomic_load_n(&st_g.live, __ATOMIC_ACQUIRE);
    if (!h || index < 0 || index >= ST_LIVE_MAX_REPEATERS)
        return NULL;
    return st_repeater_at(h, index);
}

ST_EXPORT void st_provider(const char *name, int state, int hooks)
{
    struct st_live_header *h = st_g.live;
    if (!h || !name)
        return;
    pthread_mutex_lock(&st_live_lock);
    uint32_t i;
    for (i = 0; i < h->n_providers; i++)
        if (strncmp(h->providers[i].name, name, sizeof(h->providers[i].name)) == 0)
            break;
    if (i == h->n_providers && i < ST_LIVE_MAX_PROVIDERS) {
        memset(&h->providers[i], 0, sizeof(h->providers[i]));
        strncpy(h->providers[i].name, name, sizeof(h->providers[i].name) - 1);
        __atomic_store_n(&h->n_providers, i + 1, __ATOMIC_RELEASE);
    }
    if (i < ST_LIVE_MAX_PROVIDERS) {
        h->providers[i].state = (uint32_t)state;
        h->providers[i].hooks = (uint32_t)hooks;
        if (state == ST_PROV_INSTALLED)
            h->providers[i].installed_tsc = st_now();
    }
    pthread_mutex_unlock(&st_live_lock);
    if (state == ST_PROV_INSTALLED && hooks > 0)
        st_coverage(ST_COV_HOOKS_INSTALLED);
}
