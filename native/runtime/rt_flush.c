/* The flusher: one thread per process that drains every thread's ring into its stream file,
 * publishes counters to the live block, refines the TSC rate, and watches the controller.
 * It sleeps between passes, longer while there is nothing to do (the machines have 2 cores). */
#define _GNU_SOURCE 1 /* ppoll */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"


static pthread_t st_flusher_tid;
static int st_flusher_running;
static volatile int st_flusher_quit;
static uint32_t st_flusher_gen; /* the session being flushed */
static int st_pidfd = -1;
static uint64_t st_records_total, st_drops_total, st_bytes_total, st_flush_errors, st_event_records;
static struct st_thread *st_calib_thread; /* the flusher's own state, for the last pair */
/* One encoded block; only one thread drains at a time (the flusher, or st_stop after it). */
static unsigned char st_block_buf[ST_BLOCK_MAX_SIZE] __attribute__((aligned(64)));

int st_flusher_is_self(void) { return st_flusher_running && pthread_equal(pthread_self(), st_flusher_tid); }

static int st_open_stream(struct st_thread *t)
{
    char path[64];
    int fd = -1;
    for (int n = 0; n < 1000 && fd < 0; n++) {
        if (n == 0)
            snprintf(path, sizeof(path), "t%u.bin", t->tid);
        else /* a tid reused by a later thread of the same session (or a name taken by a link) */
            snprintf(path, sizeof(path), "t%u-%d.bin", t->tid, n);
        fd = st_create_file(st_streams_fd(), path, O_WRONLY);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        st_error("flusher", "cannot create a stream file for thread %u: %s", t->tid, strerror(errno));
        return -1;
    }
    struct st_stream_header h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, ST_STREAM_MAGIC, 8);
    h.version = ST_FORMAT_VERSION;
    h.record_size = sizeof(struct st_record);
    h.pid = (uint32_t)getpid();
    h.tid = t->tid;
    h.clock = ST_CLOCK_TSC;
    memcpy(h.name, t->name, sizeof(h.name));
    if (write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h)) {
        st_error("flusher", "cannot write the header of %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int st_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Drain one thread of the flushed session.  Returns the number of records written. */
static uint64_t st_drain(struct st_thread *t, uint32_t gen)
{
    if (__atomic_load_n(&t->gen, __ATOMIC_ACQUIRE) != gen)
        return 0;
    uint64_t written = 0;
    uint64_t drops = __atomic_load_n(&t->drops, __ATOMIC_RELAXED);
    if (drops != t->flushed_drops) {
        st_drops_total += drops - t->flushed_drops;
        t->flushed_drops = drops;
    }
    if (t->ring) {
        uint64_t head = __atomic_load_n(&t->head, __ATOMIC_ACQUIRE);
        uint64_t tail = t->tail;
        uint32_t cap = t->mask + 1;
        if (head != tail && t->fd < 0)
            t->fd = st_open_stream(t);
        while (tail != head) {
            /* one block per contiguous run of the ring, at most ST_BLOCK_MAX_RECORDS */
            uint64_t idx = tail & t->mask;
            uint64_t n = head - tail;
            if (n > cap - idx)
                n = cap - idx;
            if (n > ST_BLOCK_MAX_RECORDS)
                n = ST_BLOCK_MAX_RECORDS;
            size_t size = t->fd >= 0 ? st_block_encode(&t->ring[idx], (uint32_t)n, st_block_buf) : 0;
            if (t->fd < 0 || st_write_all(t->fd, st_block_buf, size) < 0) {
                /* lost to an I/O error: counted as dropped, the stream shows a seq gap */
                if (t->fd >= 0 && st_flush_errors++ == 0)
                    st_error("flusher", "writing the stream of thread %u: %s", t->tid, strerror(errno));
                st_drops_total += n;
            } else {
                written += n;
                st_bytes_total += size;
            }
            tail += n;
            __atomic_store_n(&t->tail, tail, __ATOMIC_RELEASE);
        }
        /* stored only when it changed: the slot's line also holds the producer's call counters */
        if (t->live && t->live->records != head)
            t->live->records = head;
    }
    if (t->live && t->live->drops != drops)
        t->live->drops = drops;
    st_records_total += written;
    if (t != st_calib_thread)
        st_event_records += written; /* calibration pairs are not events of the program */
    return written;
}

void st_flush_thread(struct st_thread *t) { st_drain(t, st_flusher_gen); }

/* One pass over every thread.  Returns the fullest ring's fill ratio seen (0..1). */
static double st_flush_pass(uint32_t gen)
{
    double fullest = 0;
    for (struct st_thread *t = st_threads_head(); t; t = t->next) {
        if (t->ring && __atomic_load_n(&t->gen, __ATOMIC_ACQUIRE) == gen) {
            double fill = (double)(__atomic_load_n(&t->head, __ATOMIC_ACQUIRE) - t->tail) / (t->mask + 1);
            if (fill > fullest)
                fullest = fill;
        }
        st_drain(t, gen);
        struct st_live_header *h = st_g.live;
        if (t->gen == gen && t->live && h && !(h->coverage & ST_COV_RECORDS_FLOWING)) {
            uint64_t calls = 0;
            for (int i = 0; i < ST_LIVE_CALLS; i++)
                calls += t->live->calls[i];
            if (calls) /* aggregate mode makes no records: counters are the flow */
                st_coverage(ST_COV_RECORDS_FLOWING);
        }
        if (__atomic_load_n(&t->exited, __ATOMIC_ACQUIRE) && t->fd >= 0 &&
            t->tail == __atomic_load_n(&t->head, __ATOMIC_ACQUIRE)) {
            close(t->fd);
            t->fd = -1;
        }
    }
    st_live_publish();
    return fullest;
}

void st_live_publish(void)
{
    struct st_live_header *h = st_g.live;
    if (!h)
        return;
    h->records_written = st_records_total;
    h->records_dropped = st_drops_total;
    h->bytes_written = st_bytes_total;
    h->cold_events = st_cold_count();
    h->cold_dropped = st_cold_drop_count();
    h->flush_errors = st_flush_errors;
    h->heartbeat_tsc = st_now();
    if (st_event_records)
        st_coverage(ST_COV_RECORDS_FLOWING);
}

/* A CALIB record in the flusher's own stream: calibration pairs through the run, so that a
 * reader can fit TSC drift over long traces (the live block holds only start and end). */
static void st_put_calib(struct st_thread *t)
{
    struct st_record *r = t ? st_rec_reserve(t) : NULL;
    if (!r)
        return;
    struct st_calib c;
    st_calib_take(&c);
    memset(r, 0, offsetof(struct st_record, seq));
    r->ts = c.tsc;
    r->type = ST_REC_CALIB;
    r->addr = c.mono_ns;
    r->extra = c.real_ns;
    st_rec_commit(t, r);
}

static void st_emit_calib(void)
{
    if (st_config()->mode == ST_MODE_AGGREGATE)
        return; /* no streams in aggregate mode: the live block's start and end pairs suffice */
    /* the flusher's state is taken once: a pair due after st_stop cleared the generation must
     * not forget it (st_self() is NULL then), or the end pair would be lost */
    if (!st_calib_thread)
        st_calib_thread = st_self();
    if (st_calib_thread && st_calib_thread->gen == st_flusher_gen)
        st_put_calib(st_calib_thread);
}

static void *st_flusher_main(void *arg)
{
    uint32_t gen = st_flusher_gen;
    pthread_setname_np(pthread_self(), "st-flusher");
    int sleep_us = 1000;
    struct timespec last_cal;
    clock_gettime(CLOCK_MONOTONIC, &last_cal);
    st_emit_calib();
    while (!__atomic_load_n(&st_flusher_quit, __ATOMIC_ACQUIRE)) {
        double fullest = st_flush_pass(gen);
        st_threads_reap(gen);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - last_cal.tv_sec >= 1) {
            st_tsc_hz(); /* refines the estimate in the live header */
            st_emit_calib();
            last_cal = now;
        }
        /* busy: 100 us; some data: 1 ms; idle: back off up to flush_max_ms.  No spinning but
         * when a ring is over half full (records are about to be dropped: the flusher did not
         * get the CPU): each pass reads the producers' cursors and stores the tails, and a
         * flusher passing without pause would move those lines between cores on every record
         * (the hot path's cost would then depend on what the flusher is doing). */
        int max_us = (int)st_config()->flush_max_ms * 1000;
        if (fullest > 0.5) {
            sched_yield();
            continue;
        }
        if (fullest > 0.25)
            sleep_us = 100;
        else if (fullest > 0)
            sleep_us = 1000;
        else if (sleep_us < max_us)
            sleep_us *= 2;
        if (sleep_us > max_us)
            sleep_us = max_us;
        if (sleep_us < 100)
            sleep_us = 100;
        struct pollfd p = {.fd = st_pidfd, .events = POLLIN};
        struct timespec pause = {.tv_sec = sleep_us / 1000000, .tv_nsec = (long)(sleep_us % 1000000) * 1000};
        int r = ppoll(&p, st_pidfd >= 0 ? 1 : 0, &pause, NULL);
        if (r > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
            /* the controller is gone: stop recording here, keep the process running */
            st_stop(ST_STOP_CONTROLLER_LOST);
            break;
        }
    }
    return NULL;
}

int st_flusher_start(uint32_t gen)
{
    st_flusher_gen = gen;
    st_flusher_quit = 0;
    st_calib_thread = NULL;
    st_records_total = st_drops_total = st_bytes_total = st_flush_errors = st_event_records = 0;
    st_pidfd = -1;
    int cpid = st_config()->controller_pid;
    if (cpid > 0) {
        st_pidfd = (int)syscall(SYS_pidfd_open, cpid, 0);
        if (st_pidfd < 0)
            st_error("controller", "cannot watch controller %d (pidfd_open: %s); a killed controller will "
                     "not be noticed", cpid, strerror(errno));
    }
    /* the flusher must not receive the application's signals */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&st_flusher_tid, NULL, st_flusher_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        st_error("flusher", "cannot start the flusher thread: %s", strerror(r));
        return -1;
    }
    st_flusher_running = 1;
    return 0;
}

/* Final drain.  Called by st_stop after recording stopped; from the flusher itself when the
 * controller was lost (then it only drains: the thread ends by returning). */
void st_flusher_stop(void)
{
    if (st_flusher_running) {
        __atomic_store_n(&st_flusher_quit, 1, __ATOMIC_RELEASE);
        if (!st_flusher_is_self())
            pthread_join(st_flusher_tid, NULL);
        else
            pthread_detach(st_flusher_tid);
        st_flusher_running = 0;
    }
    /* the last pair goes into the flusher's stream: the flusher no longer writes its ring (it
     * has returned, or it is the caller), so this thread may */
    if (st_calib_thread && st_calib_thread->gen == st_flusher_gen)
        st_put_calib(st_calib_thread);
    st_flush_pass(st_flusher_gen);
    st_calib_thread = NULL;
    if (st_pidfd >= 0) {
        close(st_pidfd);
        st_pidfd = -1;
    }
}

/* In a child made by fork: there is no flusher thread; forget the parent's. */
void st_flusher_forget(void)
{
    st_flusher_running = 0;
    if (st_pidfd >= 0)
        close(st_pidfd);
    st_pidfd = -1;
}
