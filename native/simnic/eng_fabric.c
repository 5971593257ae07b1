/* Shared-memory registries of the emulated fabric (see sn_fabric.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sn_fabric.h"
#include "sn_log.h"

#define HOST_MAGIC 0x534e484f53543031ull        /* "SNHOST01" */
#define FAB_MAGIC 0x534e464142523031ull         /* "SNFABR01" */
#define INBOX_MAGIC 0x534e494e424f5831ull       /* "SNINBOX1" */
#define REG_VERSION 1

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;

static void reg_after_fork(void)
{
    pthread_mutex_init(&g_reg_lock, NULL);
}

__attribute__((constructor)) static void reg_atfork(void)
{
    pthread_atfork(NULL, NULL, reg_after_fork);
}

/* ---- processes ----------------------------------------------------------------------- */

uint64_t sn_proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long start = 0;
    ssize_t n;
    char *p;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    p = strrchr(buf, ')');  /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ')
        return 0;
    if (p[2] == 'Z' || p[2] == 'X')
        return 0;       /* exited, not yet reaped: it will never touch the fabric again */
    /* p[1] is the space before field 3 (state); starttime is field 22 */
    for (field = 2, p++; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    sscanf(p, "%llu", &start);
    return start;
}

void sn_owner_self(struct sn_owner *o)
{
    static uint64_t self_start;
    static pid_t self_pid;
    pid_t pid = getpid();

    if (self_pid != pid) {  /* also right after fork() */
        self_start = sn_proc_start_time(pid);
        self_pid = pid;
    }
    o->pid = pid;
    o->pad = 0;
    o->start = self_start;
}

int sn_owner_alive(const struct sn_owner *o)
{
    if (o->pid <= 0)
        return 0;
    if (kill(o->pid, 0) && errno == ESRCH)
        return 0;
    return sn_proc_start_time(o->pid) == o->start;
}

/* ---- shared objects ---------------------------------------------------------------------- */

struct shm_obj {
    int fd;
    void *map;
    size_t len;
    char name[256];
};

static void obj_close(struct shm_obj *o)
{
    if (o->map)
        munmap(o->map, o->len);
    if (o->fd >= 0)
        close(o->fd);
    o->map = NULL;
    o->fd = -1;
}

/* Opens (creating when missing) NAME with LEN bytes, locked (flock) on return.  An object
 * unlinked by its last user while we waited for the lock is opened afresh. */
static int obj_open_locked(struct shm_obj *o, const char *name, size_t len, int lock_op)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        struct stat st;

        snprintf(o->name, sizeof(o->name), "%s", name);
        o->fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (o->fd < 0)
            return -errno;
        if (flock(o->fd, lock_op) || fstat(o->fd, &st)) {
            int err = errno;

            close(o->fd);
            o->fd = -1;
            return -err;
        }
        if (st.st_nlink == 0) { /* removed meanwhile */
            close(o->fd);
            o->fd = -1;
            continue;
        }
        if (st.st_uid != getuid() || (st.st_mode & 077)) {
            close(o->fd);
            o->fd = -1;
            return -EACCES;
        }
        if ((size_t)st.st_size < len && ftruncate(o->fd, (off_t)len)) {
            int err = errno;

            close(o->fd);
            o->fd = -1;
            return -err;
        }
        o->len = len;
        o->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, o->fd, 0);
        if (o->map == MAP_FAILED) {
            int err = errno;

            o->map = NULL;
            close(o->fd);
            o->fd = -1;
            return -err;
        }
        return 0;
    }
    return -EAGAIN;
}

/* ---- host registry: LIDs and QP numbers -------------------------------------------------- */

static struct shm_obj g_host = {.fd = -1};

static void host_name(char *buf, size_t len)
{
    snprintf(buf, len, "/simnic.%u.host", (unsigned)getuid());
}

static void host_init_locked(struct sn_host_reg *h)
{
    if (h->magic == HOST_MAGIC)
        return;
    memset(h, 0, sizeof(*h));
    h->version = REG_VERSION;
    h->lid_hint = SN_LID_FIRST;
    atomic_store(&h->next_qpn, SN_QPN_FIRST);
    atomic_store(&h->next_key, 1);
    h->magic = HOST_MAGIC;
}

int sn_host_open(void)
{
    char name[128];
    int ret = 0;

    pthread_mutex_lock(&g_reg_lock);
    if (!g_host.map) {
        host_name(name, sizeof(name));
        ret = obj_open_locked(&g_host, name, sizeof(struct sn_host_reg), LOCK_EX);
        if (!ret) {
            host_init_locked(g_host.map);
            flock(g_host.fd, LOCK_UN);
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
    return ret;
}

int sn_lid_alloc(uint16_t *lid_out)
{
    struct sn_host_reg *h;
    struct shm_obj o = {.fd = -1};
    char name[128];
    int ret;

    if ((ret = sn_host_open()))
        return ret;
    pthread_mutex_lock(&g_reg_lock);
    /* lock through a fresh descriptor: the one we keep maps the object we hold LIDs in */
    host_name(name, sizeof(name));
    ret = obj_open_locked(&o, name, sizeof(struct sn_host_reg), LOCK_EX);
    if (ret)
        goto out;
    h = o.map;
    host_init_locked(h);
    ret = -ENOSPC;
    for (uint32_t n = 0; n < SN_LID_LIMIT - SN_LID_FIRST; n++) {
        uint32_t lid = h->lid_hint + n;

        if (lid >= SN_LID_LIMIT)
            lid = SN_LID_FIRST + (lid - SN_LID_LIMIT);
        if (h->lid[lid].pid && sn_owner_alive(&h->lid[lid]))
            continue;
        if (!h->lid[lid].pid)
            h->live++;
        sn_owner_self(&h->lid[lid]);
        h->lid_hint = lid + 1 < SN_LID_LIMIT ? lid + 1 : SN_LID_FIRST;
        *lid_out = (uint16_t)lid;
        ret = 0;
        break;
    }
    flock(o.fd, LOCK_UN);
    obj_close(&o);
out:
    pthread_mutex_unlock(&g_reg_lock);
    return ret;
}

void sn_lid_free(uint16_t lid)
{
    struct shm_obj o = {.fd = -1};
    struct sn_owner self;
    char name[128];

    sn_owner_self(&self);
    pthread_mutex_lock(&g_reg_lock);
    host_name(name, sizeof(name));
    if (!obj_open_locked(&o, name, sizeof(struct sn_host_reg), LOCK_EX)) {
        struct sn_host_reg *h = o.map;

        if (h->magic == HOST_MAGIC && lid < SN_LID_LIMIT && h->lid[lid].pid == self.pid &&
            h->lid[lid].start == self.start) {
            memset(&h->lid[lid], 0, sizeof(h->lid[lid]));
            if (h->live)
                h->live--;
        }
        if (h->magic == HOST_MAGIC && h->live && h->live < 64) {
            /* few left: count the living (killed processes never gave theirs back) */
            uint32_t live = 0;

            for (uint32_t l = SN_LID_FIRST; l < SN_LID_LIMIT; l++) {
                if (!h->lid[l].pid)
                    continue;
                if (sn_owner_alive(&h->lid[l]))
                    live++;
                else
                    memset(&h->lid[l], 0, sizeof(h->lid[l]));
            }
            h->live = live;
        }
        if (h->magic == HOST_MAGIC && h->live == 0)
            shm_unlink(name);       /* last one out: nobody holds a LID */
        flock(o.fd, LOCK_UN);
        obj_close(&o);
    }
    pthread_mutex_unlock(&g_reg_lock);
}

uint32_t sn_qpn_alloc(void)
{
    struct sn_host_reg *h = g_host.map;
    uint32_t qpn;

    do {
        qpn = atomic_fetch_add(&h->next_qpn, 1) & 0xffffff;
    } while (qpn < SN_QPN_FIRST);
    return qpn;
}

uint32_t sn_key_alloc(void)
{
    struct sn_host_reg *h = g_host.map;

    return atomic_fetch_add(&h->next_key, 1);
}

/* ---- fabric registry ----------------------------------------------------------------------- */

static char g_fabric[65];

static void fabric_name_init(void)
{
    const char *env = getenv("SIMNIC_FABRIC");

    snprintf(g_fabric, sizeof(g_fabric), "default");
    if (!env || !*env)
        return;
    for (size_t i = 0; env[i]; i++) {
        char c = env[i];

        if (i >= 64 || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '-' || c == '_')) {
            sn_log("SIMNIC_FABRIC=%s is not a name of up to 64 letters, digits, '-' or '_'; "
                   "using the fabric 'default'", env);
            return;
        }
    }
    snprintf(g_fabric, sizeof(g_fabric), "%s", env);
}

const char *sn_fabric_name(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, fabric_name_init);
    return g_fabric;
}

static void fabric_obj_name(char *buf, size_t len)
{
    snprintf(buf, len, "/simnic.%u.fab.%s", (unsigned)getuid(), sn_fabric_name());
}

static void inbox_name(char *buf, size_t len, uint16_t lid)
{
    snprintf(buf, len, "/simnic.%u.fab.%s.%u", (unsigned)getuid(), sn_fabric_name(), lid);
}

static void fabric_init_locked(struct sn_fabric_reg *f)
{
    if (f->magic == FAB_MAGIC)
        return;
    memset(f, 0, sizeof(*f));
    f->version = REG_VERSION;
    f->magic = FAB_MAGIC;
}

/* Drops the entries (and inboxes) of processes that died without leaving. */
static void fabric_sweep_locked(struct sn_fabric_reg *f)
{
    char name[256];

    for (int i = 0; i < SN_FABRIC_PORTS; i++) {
        struct sn_fab_port *p = &f->port[i];

        if (p->owner.pid && !sn_owner_alive(&p->owner)) {
            inbox_name(name, sizeof(name), p->lid);
            shm_unlink(name);
            memset(p, 0, sizeof(*p));
        }
    }
}

/* Removes what killed processes left on the other fabrics of this user: registries without a
 * live port, and the inboxes of dead ports.  Live ports are never touched, nor fabrics created
 * less than SIMNIC_GC_AGE_S seconds ago (default 10: what a crash left stays visible to
 * `sigmatrace simnic status` for a while).  Every change is made under the registry's flock; a
 * process creating or joining that fabric at the same time finds the registry unlinked after
 * taking the lock and opens a fresh one (obj_open_locked). */
static void fabric_gc_others(void)
{
    char prefix[64], own[256], name[512];
    const char *env = getenv("SIMNIC_GC_AGE_S");
    long min_age = env ? atol(env) : 10;
    time_t now = time(NULL);
    size_t plen;
    struct dirent *e;
    DIR *d;

    snprintf(prefix, sizeof(prefix), "simnic.%u.fab.", (unsigned)getuid());
    plen = strlen(prefix);
    fabric_obj_name(own, sizeof(own));
    d = opendir("/dev/shm");
    if (!d)
        return;
    while ((e = readdir(d))) {
        struct sn_fabric_reg *f;
        struct stat st;
        int fd, live = 0;

        /* registries only: "simnic.<uid>.fab.<fabric>", no further dot */
        if (strncmp(e->d_name, prefix, plen) || strchr(e->d_name + plen, '.'))
            continue;
        snprintf(name, sizeof(name), "/%s", e->d_name);
        if (!strcmp(name, own))
            continue;       /* ours: swept when we join */
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) || fstat(fd, &st) || st.st_nlink == 0 ||
            st.st_uid != getuid() || (size_t)st.st_size < sizeof(*f) ||
            now - (st.st_mtime > st.st_ctime ? st.st_mtime : st.st_ctime) < min_age) {
            close(fd);      /* busy (someone is in it: alive), gone, or not ours */
            continue;
        }
        f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (f != MAP_FAILED) {
            if (f->magic == FAB_MAGIC) {
                for (int i = 0; i < SN_FABRIC_PORTS; i++) {
                    struct sn_fab_port *p = &f->port[i];

                    if (!p->owner.pid)
                        continue;
                    if (sn_owner_alive(&p->owner)) {
                        live++;
                        continue;
                    }
                    snprintf(name, sizeof(name), "/%s.%u", e->d_name, p->lid);
                    shm_unlink(name);
                    memset(p, 0, sizeof(*p));
                }
            }
            /* a registry never initialised is being created right now: leave it */
            if (f->magic == FAB_MAGIC && !live) {
                snprintf(name, sizeof(name), "/%s", e->d_name);
                shm_unlink(name);
            }
            munmap(f, sizeof(*f));
        }
        flock(fd, LOCK_UN);
        close(fd);
    }
    closedir(d);
}

int sn_fabric_join(uint16_t lid, uint16_t dev, const uint8_t gid[16])
{
    static pthread_once_t gc_once = PTHREAD_ONCE_INIT;

    struct shm_obj o = {.fd = -1};
    struct sn_fabric_reg *f;
    char name[256];
    int ret;

    pthread_once(&gc_once, fabric_gc_others);
    pthread_mutex_lock(&g_reg_lock);
    fabric_obj_name(name, sizeof(name));
    ret = obj_open_locked(&o, name, sizeof(struct sn_fabric_reg), LOCK_EX);
    if (ret)
        goto out;
    f = o.map;
    fabric_init_locked(f);
    fabric_sweep_locked(f);
    ret = -ENOSPC;
    for (int i = 0; i < SN_FABRIC_PORTS; i++) {
        struct sn_fab_port *p = &f->port[i];

        if (p->owner.pid)
            continue;
        sn_owner_self(&p->owner);
        p->lid = lid;
        p->dev = dev;
        p->gen++;
        memcpy(p->gid, gid, 16);
        ret = 0;
        break;
    }
    flock(o.fd, LOCK_UN);
    obj_close(&o);
out:
    pthread_mutex_unlock(&g_reg_lock);
    return ret;
}

void sn_fabric_leave(uint16_t lid)
{
    struct shm_obj o = {.fd = -1};
    struct sn_owner self;
    char name[256];
    int live = 0;

    sn_owner_self(&self);
    pthread_mutex_lock(&g_reg_lock);
    fabric_obj_name(name, sizeof(name));
    if (!obj_open_locked(&o, name, sizeof(struct sn_fabric_reg), LOCK_EX)) {
        struct sn_fabric_reg *f = o.map;

        fabric_init_locked(f);
        for (int i = 0; i < SN_FABRIC_PORTS; i++) {
            struct sn_fab_port *p = &f->port[i];

            if (p->lid == lid && p->owner.pid == self.pid && p->owner.start == self.start)
                memset(p, 0, sizeof(*p));
        }
        fabric_sweep_locked(f);
        for (int i = 0; i < SN_FABRIC_PORTS; i++)
            live += f->port[i].owner.pid != 0;
        if (!live)
            shm_unlink(name);
        flock(o.fd, LOCK_UN);
        obj_close(&o);
    }
    pthread_mutex_unlock(&g_reg_lock);
}

int sn_fabric_lookup(uint16_t lid, const uint8_t *gid, uint16_t *lid_out, struct sn_owner *owner_out)
{
    struct shm_obj o = {.fd = -1};
    char name[256];
    int ret;

    pthread_mutex_lock(&g_reg_lock);
    fabric_obj_name(name, sizeof(name));
    ret = obj_open_locked(&o, name, sizeof(struct sn_fabric_reg), LOCK_SH);
    if (ret)
        goto out;
    ret = -ENOENT;
    if (((struct sn_fabric_reg *)o.map)->magic == FAB_MAGIC) {
        struct sn_fabric_reg *f = o.map;

        for (int i = 0; i < SN_FABRIC_PORTS; i++) {
            struct sn_fab_port *p = &f->port[i];

            if (!p->owner.pid)
                continue;
            if (lid ? p->lid != lid : memcmp(p->gid, gid, 16))
                continue;
            if (!sn_owner_alive(&p->owner))
                continue;
            *lid_out = p->lid;
            *owner_out = p->owner;
            ret = 0;
            break;
        }
    }
    flock(o.fd, LOCK_UN);
    obj_close(&o);
out:
    pthread_mutex_unlock(&g_reg_lock);
    return ret;
}

/* ---- inboxes --------------------------------------------------------------------------------- */

static size_t inbox_len(uint64_t ring_bytes)
{
    return sizeof(struct sn_inbox) + (size_t)SN_INBOX_SLOTS * 2 * ring_bytes;
}

struct sn_inbox *sn_inbox_create(uint16_t lid, uint64_t ring_bytes, size_t *map_len)
{
    char name[256];
    struct sn_inbox *ib;
    size_t len = inbox_len(ring_bytes);
    int fd;

    inbox_name(name, sizeof(name), lid);
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {        /* left by a dead earlier owner of this LID */
        shm_unlink(name);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0)
        return NULL;
    if (ftruncate(fd, (off_t)len)) {
        close(fd);
        shm_unlink(name);
        return NULL;
    }
    ib = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (ib == MAP_FAILED) {
        shm_unlink(name);
        return NULL;
    }
    ib->version = REG_VERSION;
    ib->lid = lid;
    sn_owner_self(&ib->owner);
    ib->ring_bytes = ring_bytes;
    atomic_store(&ib->wake_seq, 0);
    atomic_store(&ib->sleeping, 0);
    atomic_store_explicit((_Atomic uint64_t *)&ib->magic, INBOX_MAGIC, memory_order_release);
    *map_len = len;
    return ib;
}

void sn_inbox_unlink(uint16_t lid)
{
    char name[256];

    inbox_name(name, sizeof(name), lid);
    shm_unlink(name);
}

void sn_inbox_destroy(struct sn_inbox *ib, size_t map_len, uint16_t lid)
{
    sn_inbox_unlink(lid);
    munmap(ib, map_len);
}

struct sn_inbox *sn_inbox_map(uint16_t lid, size_t *map_len)
{
    char name[256];
    struct sn_inbox *ib;
    struct stat st;
    int fd;

    inbox_name(name, sizeof(name), lid);
    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) || (size_t)st.st_size < sizeof(struct sn_inbox) || st.st_uid != getuid()) {
        close(fd);
        return NULL;
    }
    ib = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (ib == MAP_FAILED)
        return NULL;
    if (atomic_load_explicit((_Atomic uint64_t *)&ib->magic, memory_order_acquire) != INBOX_MAGIC ||
        inbox_len(ib->ring_bytes) > (size_t)st.st_size) {
        munmap(ib, (size_t)st.st_size);
        return NULL;
    }
    *map_len = (size_t)st.st_size;
    return ib;
}

static void slot_setup(struct sn_slot *s, uint16_t sender_lid, const struct sn_owner *me)
{
    atomic_store(&s->req.head, 0);
    atomic_store(&s->req.tail, 0);
    atomic_store(&s->resp.head, 0);
    atomic_store(&s->resp.tail, 0);
    s->sender_lid = sender_lid;
    s->sender = *me;
    atomic_store_explicit(&s->state, 2, memory_order_release);
}

int sn_inbox_claim(struct sn_inbox *ib, uint16_t sender_lid)
{
    struct sn_owner me;

    sn_owner_self(&me);
    for (int i = 0; i < SN_INBOX_SLOTS; i++) {
        struct sn_slot *s = &ib->slot[i];

        if (atomic_load_explicit(&s->state, memory_order_acquire) == 2 &&
            s->sender_lid == sender_lid && s->sender.pid == me.pid && s->sender.start == me.start)
            return i;
    }
    for (int i = 0; i < SN_INBOX_SLOTS; i++) {
        uint32_t expect = 0;

        if (atomic_compare_exchange_strong(&ib->slot[i].state, &expect, 1)) {
            slot_setup(&ib->slot[i], sender_lid, &me);
            return i;
        }
    }
    for (int i = 0; i < SN_INBOX_SLOTS; i++) {      /* reclaim a slot of a dead sender */
        struct sn_slot *s = &ib->slot[i];
        uint32_t expect = 2;

        if (sn_owner_alive(&s->sender))
            continue;
        if (atomic_compare_exchange_strong(&s->state, &expect, 1)) {
            slot_setup(s, sender_lid, &me);
            return i;
        }
    }
    return -1;
}

/* ---- futex on shared memory --------------------------------------------------------------- */

void sn_futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void sn_futex_wait(_Atomic uint32_t *word, uint32_t val, long timeout_ns)
{
    struct timespec ts = {.tv_sec = timeout_ns / 1000000000L, .tv_nsec = timeout_ns % 1000000000L};

    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, val, &ts, NULL, 0);
}
