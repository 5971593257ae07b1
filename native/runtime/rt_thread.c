/* Per-thread recording state: made on a thread's first hooked call of a session, kept for the
 * life of the thread (never freed while the thread lives: it may be inside a hook when tracing
 * stops), drained and freed by the flusher once the thread has exited. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rt.h"

/* Every thread starts out pointing here; its gen never equals a session generation, so the
 * first hooked call of a thread takes the slow path. */
static struct st_thread st_idle_thread = {.gen = UINT32_MAX, .fd = -1, .slot = UINT32_MAX};
__thread struct st_thread *st_tls __attribute__((tls_model("initial-exec"))) = &st_idle_thread;

static struct st_thread *st_all; /* push-only list, removal by the flusher only */
static pthread_key_t st_exit_key;
static pthread_once_t st_key_once = PTHREAD_ONCE_INIT;
/* Counters of threads that found the live thread table full go here (not shown anywhere; the
 * overflow itself is reported).  Shared by such threads: their counts are lost, not wrong. */
static struct st_live_thread st_scratch_slot;

uint32_t st_gettid(void) { return (uint32_t)syscall(SYS_gettid); }

struct st_thread *st_threads_head(void) { return __atomic_load_n(&st_all, __ATOMIC_ACQUIRE); }

static void st_thread_exit(void *arg)
{
    struct st_thread *t = arg;
    st_tls = &st_idle_thread;
    __atomic_store_n(&t->exited, 1, __ATOMIC_RELEASE);
}

static void st_make_key(void) { pthread_key_create(&st_exit_key, st_thread_exit); }

static uint32_t st_live_thread_slot(struct st_thread *t, struct st_live_header *h)
{
    if (!h)
        return UINT32_MAX;
    uint32_t i = __atomic_fetch_add(&h->n_threads, 1, __ATOMIC_RELAXED);
    if (i >= ST_LIVE_MAX_THREADS) {
        __atomic_store_n(&h->n_threads, ST_LIVE_MAX_THREADS, __ATOMIC_RELAXED);
        st_error("threads", "live thread table full: counters of thread %u are not shown", t->tid);
        return UINT32_MAX;
    }
    return i;
}

/* A fresh session view of thread `t` (owned by the calling thread). */
static int st_thread_reset(struct st_thread *t, uint32_t gen)
{
    const struct st_config *c = st_config();
    uint32_t cap = c->mode == ST_MODE_AGGREGATE ? 0 : c->ring_records;
    if (cap && t->ring_cap != cap) {
        if (t->ring)
            munmap(t->ring, (size_t)t->ring_cap * sizeof(struct st_record));
        t->ring = NULL;
        t->ring_cap = 0;
        /* populated now so that the hot path never takes a page fault */
        void *m = mmap(NULL, (size_t)cap * sizeof(struct st_record), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (m == MAP_FAILED) {
            st_error("threads", "ring of %u records for thread %u: %s", cap, t->tid, strerror(errno));
            cap = 0;
        } else {
            t->ring = m;
            t->ring_cap = cap;
        }
    }
    if (cap) {
        memset(t->ring, 0, (size_t)cap * sizeof(struct st_record));
        t->mask = cap - 1;
        t->head = 0;
        t->tail_cache = 0;
    } else {
        /* no ring: head - tail_cache > mask always, so st_rec_reserve goes to st_ring_full */
        t->mask = 0;
        t->head = 1;
        t->tail_cache = 0;
    }
    t->drops = 0;
    t->seq = 0;
    t->call_depth = 0; /* a call open when the last session ended never returns in this one */
    t->unwritten_calls = 0;
    t->retry.count = 0;
    t->tail = 0;
    t->flushed_drops = 0;
    if (t->fd >= 0) {
        close(t->fd);
        t->fd = -1;
    }
    /* loaded once: st_g.live becomes NULL when the session ends (the range stays writable) */
    struct st_live_header *h = __atomic_load_n(&st_g.live, __ATOMIC_ACQUIRE);
    t->slot = st_live_thread_slot(t, h);
    if (t->slot != UINT32_MAX) {
        t->live = (struct st_live_thread *)((char *)h + ST_LIVE_THREAD_OFFSET +
                                            (size_t)t->slot * ST_LIVE_THREAD_SIZE);
        memset(t->live, 0, sizeof(*t->live));
        for (int i = 0; i < ST_LIVE_THREAD_QPS; i++)
            t->live->qps[i].remote_qpn = UINT32_MAX;
        t->live->tid = t->tid;
        memcpy(t->live->name, t->name, sizeof(t->live->name));
        __atomic_store_n(&t->live->in_use, 1, __ATOMIC_RELEASE);
    } else {
        t->live = &st_scratch_slot;
    }
    __atomic_store_n(&t->flushed_gen, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->gen, gen, __ATOMIC_RELEASE);
    return 0;
}

ST_COLD struct st_thread *st_thread_slow(void)
{
    uint32_t gen = __atomic_load_n(&st_g.gen, __ATOMIC_ACQUIRE);
    if (!gen)
        return NULL;
    struct st_thread *t = st_tls;
    if (t == &st_idle_thread) {
        pthread_once(&st_key_once, st_make_key);
        /* aligned to a cache line: malloc's 16 bytes would put the flusher's tail on the line
         * of the producer's seq and head */
        if (posix_memalign((void **)&t, 64, sizeof(*t)) != 0)
            t = NULL;
        else
            memset(t, 0, sizeof(*t));
        if (!t) {
            st_error("threads", "out of memory for thread state");
            return NULL;
        }
        t->fd = -1;
        t->tid = st_gettid();
        t->slot = UINT32_MAX;
        t->gen = UINT32_MAX;
        if (pthread_getname_np(pthread_self(), t->name, sizeof(t->name)) != 0)
            t->name[0] = 0;
        st_thread_reset(t, gen);
        /* push on the list of all thread states */
        struct st_thread *old = __atomic_load_n(&st_all, __ATOMIC_RELAXED);
        do
            t->next = old;
        while (!__atomic_compare_exchange_n(&st_all, &old, t, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
        pthread_setspecific(st_exit_key, t);
        st_tls = t;
        return t;
    }
    /* a thread known from an earlier session: its stream of that session was closed by st_stop */
    st_thread_reset(t, gen);
    return t;
}

ST_COLD struct st_record *st_ring_full(struct st_thread *t)
{
    if (!t->ring)
        return NULL; /* aggregate mode: no records, nothing dropped */
    t->tail_cache = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE);
    if (t->head - t->tail_cache > t->mask) {
        t->drops++;
        return NULL;
    }
    return &t->ring[t->head & t->mask];
}

void st_thread_name(const char *name)
{
    struct st_thread *t = st_self();
    if (!t)
        return;
    strncpy(t->name, name, sizeof(t->name) - 1);
    t->name[sizeof(t->name) - 1] = 0;
    if (t->live)
        memcpy(t->live->name, t->name, sizeof(t->live->name));
}

/* After the final drain of a session: close every stream (the thread states stay). */
void st_threads_stop_all(void)
{
    for (struct st_thread *t = st_threads_head(); t; t = t->next) {
        if (t->fd >= 0) {
            close(t->fd);
            t->fd = -1;
        }
    }
}

/* Flusher only: unlink and free the states of threads that exited and were drained (a thread
 * of an earlier session was drained when that session stopped). */
void st_threads_reap(uint32_t gen)
{
    struct st_thread **pp = &st_all;
    struct st_thread *t = __atomic_load_n(pp, __ATOMIC_ACQUIRE);
    while (t) {
        struct st_thread *next = t->next;
        int dead = __atomic_load_n(&t->exited, __ATOMIC_ACQUIRE) &&
                   (t->gen != gen || !t->ring || t->tail == __atomic_load_n(&t->head, __ATOMIC_ACQUIRE));
        if (dead && t->gen == gen) {
            /* what it did between the last drain and its exit (records, drops) */
            st_flush_thread(t);
            dead = t->tail == __atomic_load_n(&t->head, __ATOMIC_ACQUIRE) || !t->ring;
            if (dead && t->fd >= 0) {
                close(t->fd);
                t->fd = -1;
            }
        }
        if (!dead || t->fd >= 0) {
            pp = &t->next;
            t = next;
            continue;
        }
        if (pp == &st_all) {
            struct st_thread *expect = t;
            if (!__atomic_compare_exchange_n(&st_all, &expect, next, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                /* a thread pushed itself meanwhile: t is no longer first; retry from the top */
                pp = &st_all;
                t = __atomic_load_n(pp, __ATOMIC_ACQUIRE);
                continue;
            }
        } else {
            *pp = next;
        }
        if (t->live && t->slot != UINT32_MAX && t->gen == gen) /* a slot of this session's block */
            __atomic_store_n(&t->live->in_use, 2, __ATOMIC_RELEASE); /* 2: the thread has exited */
        if (t->ring)
            munmap(t->ring, (size_t)t->ring_cap * sizeof(struct st_record));
        free(t);
        t = next;
    }
}

/* In a child made by fork: only the forking thread exists.  The other states are left as they
 * are (their memory is a copy), the streams are the parent's (closed here, not written). */
void st_threads_forget(void)
{
    for (struct st_thread *t = st_threads_head(); t; t = t->next) {
        if (t->fd >= 0)
            close(t->fd);
        t->fd = -1;
    }
    st_all = NULL;
    st_tls = &st_idle_thread;
}
