/* Session life cycle: st_init (configuration, files, flusher, start calibration), st_stop
 * (recording off, slots restored, final drain, end calibration), the process-exit and fork
 * paths, stop hooks, and the originals of replaceFast-ed functions. */
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"

struct st_global st_g;

static struct st_config st_cfg;
static pthread_mutex_t st_session_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t st_last_gen;
static struct st_calib st_start_cal;

/* Every key of the session's configuration, with its effective value: the ones given to st_init,
 * then each key of the table (config_keys.h) that was not given, from SIGMATRACE_<KEY> (tuning
 * keys) or the table's default. */
#define ST_MAX_KEYS 96
enum { ST_SRC_GIVEN, ST_SRC_ENV, ST_SRC_DEFAULT };
static char st_keys[ST_MAX_KEYS][64];
static char st_vals[ST_MAX_KEYS][512];
static unsigned char st_srcs[ST_MAX_KEYS];
static int st_nkeys;

/* The table as text for the command line (config_keys.h): name, type, default, scope, meaning. */
#define ST_CONFIG_KEY_LINE(name, type, dflt, scope, meaning) #name "\t" type "\t" dflt "\t" scope "\t" meaning "\n"
ST_EXPORT const char st_config_keys[] = ST_CONFIG_KEYS(ST_CONFIG_KEY_LINE);

const struct st_config *st_config(void) { return &st_cfg; }

/* A key given twice: the later line wins. */
const char *st_config_get(const char *key)
{
    for (int i = st_nkeys - 1; i >= 0; i--)
        if (strcmp(st_keys[i], key) == 0)
            return st_vals[i];
    return NULL;
}

/* ---- time ---- */

void st_calib_take(struct st_calib *out)
{
    /* the TSC read between two clock reads; the pair with the tightest bracket of three wins */
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        struct timespec m0, m1, r;
        clock_gettime(CLOCK_MONOTONIC, &m0);
        uint64_t tsc = st_now();
        clock_gettime(CLOCK_REALTIME, &r);
        clock_gettime(CLOCK_MONOTONIC, &m1);
        uint64_t a = (uint64_t)m0.tv_sec * 1000000000ull + (uint64_t)m0.tv_nsec;
        uint64_t b = (uint64_t)m1.tv_sec * 1000000000ull + (uint64_t)m1.tv_nsec;
        if (b - a < best) {
            best = b - a;
            out->tsc = tsc;
            out->mono_ns = a + (b - a) / 2;
            out->real_ns = (uint64_t)r.tv_sec * 1000000000ull + (uint64_t)r.tv_nsec;
        }
    }
}

double st_tsc_hz(void)
{
    struct st_live_header *h = st_g.live;
    struct st_calib now;
    st_calib_take(&now);
    if (now.mono_ns <= st_start_cal.mono_ns + 1000000) /* under 1 ms: not yet meaningful */
        return h ? h->tsc_hz : 0;
    double hz = (double)(now.tsc - st_start_cal.tsc) * 1e9 / (double)(now.mono_ns - st_start_cal.mono_ns);
    if (h)
        h->tsc_hz = hz;
    return hz;
}

/* ---- configuration ---- */

static int st_parse_mode(const char *v)
{
    if (!strcmp(v, "aggregate")) return ST_MODE_AGGREGATE;
    if (!strcmp(v, "simple")) return ST_MODE_SIMPLE;
    if (!strcmp(v, "full")) return ST_MODE_FULL;
    return -1;
}

static int st_parse_doorbells(const char *v)
{
    if (!strcmp(v, "off")) return ST_DB_OFF;
    if (!strcmp(v, "forward")) return ST_DB_FORWARD;
    if (!strcmp(v, "wqe")) return ST_DB_WQE;
    return -1;
}

static int st_add_key(const char *key, size_t kl, const char *val, size_t vl, int src, char *err, size_t errlen)
{
    if (st_nkeys >= ST_MAX_KEYS) {
        snprintf(err, errlen, "more than %d configuration keys", ST_MAX_KEYS);
        return -1;
    }
    if (kl >= sizeof(st_keys[0]) || vl >= sizeof(st_vals[0])) {
        snprintf(err, errlen, "configuration line too long: %.40s", key);
        return -1;
    }
    memcpy(st_keys[st_nkeys], key, kl);
    st_keys[st_nkeys][kl] = 0;
    memcpy(st_vals[st_nkeys], val, vl);
    st_vals[st_nkeys][vl] = 0;
    st_srcs[st_nkeys] = (unsigned char)src;
    st_nkeys++;
    return 0;
}

/* Keys of the table not given: SIGMATRACE_<KEY> for a tuning key, else the default. */
static int st_fill_defaults(char *err, size_t errlen)
{
#define ST_CONFIG_FILL(name, type, dflt, scope, meaning)                                            \
    if (!st_config_get(#name)) {                                                                   \
        char env[96] = "SIGMATRACE_";                                                              \
        size_t n = strlen(env);                                                                    \
        for (const char *k = #name; *k && n + 1 < sizeof(env); k++)                                \
            env[n++] = (char)((*k >= 'a' && *k <= 'z') ? *k - 32 : *k);                            \
        env[n] = 0;                                                                                \
        const char *v = strcmp(scope, "tuning") == 0 ? getenv(env) : NULL;                        \
        int src = v ? ST_SRC_ENV : ST_SRC_DEFAULT;                                                 \
        if (!v)                                                                                    \
            v = dflt;                                                                              \
        if (st_add_key(#name, strlen(#name), v, strlen(v), src, err, errlen) != 0)                 \
            return -1;                                                                             \
    }
    ST_CONFIG_KEYS(ST_CONFIG_FILL)
#undef ST_CONFIG_FILL
    return 0;
}

static int st_parse_config(const char *text, char *err, size_t errlen)
{
    memset(&st_cfg, 0, sizeof(st_cfg));
    st_nkeys = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq) {
            size_t kl = (size_t)(eq - p);
            if (st_add_key(p, kl, eq + 1, len - kl - 1, ST_SRC_GIVEN, err, errlen) != 0)
                return -1;
        }
        p += len;
        if (*p == '\n')
            p++;
    }
    if (st_fill_defaults(err, errlen) != 0)
        return -1;
    /* the runtime core's own keys, from their effective values */
    const char *v;
    snprintf(st_cfg.dir, sizeof(st_cfg.dir), "%s", st_config_get("dir"));
    if ((st_cfg.mode = st_parse_mode(v = st_config_get("mode"))) < 0) {
        snprintf(err, errlen, "unknown mode '%s'", v);
        return -1;
    }
    if ((st_cfg.doorbells = st_parse_doorbells(v = st_config_get("doorbells"))) < 0) {
        snprintf(err, errlen, "unknown doorbell mode '%s'", v);
        return -1;
    }
    st_cfg.controller_pid = atoi(st_config_get("controller_pid"));
    st_cfg.attached = atoi(st_config_get("attached")) != 0;
    unsigned long n = strtoul(v = st_config_get("ring_records"), NULL, 0);
    if (n < 64 || n > (1ul << 26) || (n & (n - 1))) {
        snprintf(err, errlen, "ring_records must be a power of two in [64, 2^26], not '%s'", v);
        return -1;
    }
    st_cfg.ring_records = (uint32_t)n;
    st_cfg.flush_max_ms = (uint32_t)strtoul(st_config_get("flush_max_ms"), NULL, 0);
    if (st_cfg.flush_max_ms < 1)
        st_cfg.flush_max_ms = 1;
    if (!st_cfg.dir[0]) {
        snprintf(err, errlen, "no trace directory given (dir=...)");
        return -1;
    }
    return 0;
}

/* snprintf at out+o that never runs past n (a cut object is still closed by the caller's n) */
static size_t st_appendf(char *out, size_t n, size_t o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t st_appendf(char *out, size_t n, size_t o, const char *fmt, ...)
{
    if (o + 1 >= n)
        return o;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out + o, n - o, fmt, ap);
    va_end(ap);
    if (w < 0)
        return o;
    return o + (size_t)w < n ? o + (size_t)w : n - 1;
}

/* The `runtime` cold event's "set" (keys given, but dir) and "env" (taken from SIGMATRACE_<KEY>)
 * objects, and a note of given keys the table does not have (kept for st_config_get). */
static void st_describe_config(char *out, size_t n)
{
    size_t o = 0;
    out[0] = 0;
    for (int src = ST_SRC_GIVEN; src <= ST_SRC_ENV; src++) {
        o = st_appendf(out, n, o, ",\"%s\":{", src == ST_SRC_GIVEN ? "set" : "env");
        int first = 1;
        for (int i = 0; i < st_nkeys; i++) {
            if (st_srcs[i] != src || strcmp(st_keys[i], "dir") == 0)
                continue;
            char k[140], v[1100];
            st_json_str(k, sizeof(k), st_keys[i]);
            st_json_str(v, sizeof(v), st_vals[i]);
            o = st_appendf(out, n, o, "%s%s:%s", first ? "" : ",", k, v);
            first = 0;
        }
        o = st_appendf(out, n, o, "}");
    }
    for (int i = 0; i < st_nkeys; i++)
        if (!st_config_default(st_keys[i]))
            st_error("init", "configuration key '%s' is not one of the runtime's (config_keys.h); ignored by the runtime core",
                     st_keys[i]);
}

/* ---- stop hooks ---- */

#define ST_MAX_STOP_HOOKS 16
static struct {
    st_stop_hook fn;
    void *arg;
} st_hooks[ST_MAX_STOP_HOOKS];
static int st_nhooks;
static pthread_mutex_t st_hooks_lock = PTHREAD_MUTEX_INITIALIZER;

int st_on_stop(st_stop_hook fn, void *arg)
{
    pthread_mutex_lock(&st_hooks_lock);
    int r = -1;
    if (st_nhooks < ST_MAX_STOP_HOOKS) {
        st_hooks[st_nhooks].fn = fn;
        st_hooks[st_nhooks].arg = arg;
        st_nhooks++;
        r = 0;
    }
    pthread_mutex_unlock(&st_hooks_lock);
    return r;
}

void st_run_stop_hooks(int reason)
{
    for (int i = 0; i < st_nhooks; i++)
        st_hooks[i].fn(reason, st_hooks[i].arg);
}

/* ---- session ---- */

static void st_atfork_child(void);

ST_EXPORT int st_init(const char *config)
{
    static int registered;
    char err[512] = "";
    pthread_mutex_lock(&st_session_lock);
    if (st_g.gen) {
        pthread_mutex_unlock(&st_session_lock);
        st_error("init", "tracing is already active in this process");
        return -EBUSY;
    }
    if (st_parse_config(config, err, sizeof(err)) != 0) {
        pthread_mutex_unlock(&st_session_lock);
        st_error("init", "%s", err);
        return -EINVAL;
    }
    int rc = st_dirs_open(st_cfg.dir);
    if (rc != 0) {
        pthread_mutex_unlock(&st_session_lock);
        return rc;
    }
    if (st_cold_open(st_cfg.dir) != 0) {
        int e = errno;
        st_dirs_close();
        pthread_mutex_unlock(&st_session_lock);
        st_error("init", "cannot create %s/cold.jsonl: %s", st_cfg.dir, strerror(e));
        return -e;
    }
    if (st_live_open(st_cfg.dir, st_cfg.mode, st_cfg.doorbells, st_cfg.attached) != 0) {
        st_cold_close();
        st_dirs_close();
        pthread_mutex_unlock(&st_session_lock);
        return -EIO;
    }
    st_g.mode = st_cfg.mode;
    st_calib_take(&st_start_cal);
    st_g.live->start_tsc = st_start_cal.tsc;
    st_g.live->start_mono_ns = st_start_cal.mono_ns;
    st_g.live->start_real_ns = st_start_cal.real_ns;
    /* generations never take 0 (stopped) or UINT32_MAX (a thread's initial state) */
    uint32_t gen = st_last_gen + 1;
    if (gen == 0 || gen == UINT32_MAX)
        gen = 1;
    st_last_gen = gen;
    st_g.live->state = ST_STATE_TRACING;
    __atomic_store_n(&st_g.gen, gen, __ATOMIC_RELEASE); /* before the flusher: it records too */
    if (st_flusher_start(gen) != 0) {
        __atomic_store_n(&st_g.gen, 0, __ATOMIC_RELEASE);
        st_live_close(ST_STATE_DETACHED);
        st_cold_close();
        st_dirs_close();
        pthread_mutex_unlock(&st_session_lock);
        return -EAGAIN;
    }
    if (!registered) {
        registered = 1;
        pthread_atfork(NULL, NULL, st_atfork_child);
    }
    st_coverage(ST_COV_RUNTIME_READY);
    char described[4096];
    st_describe_config(described, sizeof(described));
    st_coldf(st_start_cal.tsc, "\"ev\":\"runtime\",\"mode\":%d,\"ring_records\":%u,\"attached\":%s%s",
             st_cfg.mode, st_cfg.ring_records, st_cfg.attached ? "true" : "false", described);
    pthread_mutex_unlock(&st_session_lock);
    return 0;
}

static void st_stop_locked(int reason)
{
    if (!st_g.gen)
        return;
    /* stop hooks run while recording is still on, so what they account for (the WQEs a
     * repeater holds for its next batch) is recorded, not only counted; the verbs hooks put
     * the replaced slots back there */
    st_run_stop_hooks(reason);
    /* hooks that are still reached stop recording; repeaters keep forwarding */
    __atomic_store_n(&st_g.gen, 0, __ATOMIC_RELEASE);
    /* let a thread that was inside a hook finish its record before the final drain */
    if (reason != ST_STOP_EXIT)
        usleep(2000);
    st_flusher_stop();
    st_threads_stop_all();
    const char *ev = reason == ST_STOP_CONTROLLER_LOST ? "controller_lost" : reason == ST_STOP_EXIT ? "exit" : "detach";
    st_coldf(st_now(), "\"ev\":\"%s\"", ev);
    st_live_publish();
    st_live_close(reason == ST_STOP_CONTROLLER_LOST ? ST_STATE_CONTROLLER_LOST
                  : reason == ST_STOP_EXIT          ? ST_STATE_EXITED
                                                    : ST_STATE_DETACHED);
    st_cold_close();
    st_dirs_close();
}

ST_EXPORT void st_stop(int reason)
{
    if (reason == ST_STOP_CONTROLLER_LOST && st_flusher_is_self()) {
        /* the flusher noticed; if the agent is stopping the session right now, it joins us */
        if (pthread_mutex_trylock(&st_session_lock) != 0)
            return;
    } else {
        pthread_mutex_lock(&st_session_lock);
    }
    st_stop_locked(reason);
    pthread_mutex_unlock(&st_session_lock);
}

/* The process is exiting normally (exit() or return from main).  A destructor of a library
 * loaded at run time runs after the application's atexit handlers, so their verbs calls (the
 * destroys at the end of a program) are still recorded. */
__attribute__((destructor)) static void st_at_exit(void) { st_stop(ST_STOP_EXIT); }

/* A child made by fork (without exec) inherits our memory but not the flusher: it forwards
 * every call and records nothing until a controller initialises tracing in it. */
static void st_atfork_child(void)
{
    pthread_mutex_init(&st_session_lock, NULL);
    if (!st_g.gen)
        return;
    __atomic_store_n(&st_g.gen, 0, __ATOMIC_RELEASE);
    st_flusher_forget();
    st_threads_forget();
    st_cold_close();
    st_dirs_close();
    st_live_forget();
}

/* ---- originals of replaceFast-ed functions ---- */

extern struct st_original *__start_st_originals[] __attribute__((weak));
extern struct st_original *__stop_st_originals[] __attribute__((weak));
/* one entry so the section always exists */
ST_ORIGINAL(st_original_selftest, "sigmatrace_selftest");

ST_EXPORT int st_set_original(const char *name, void *ptr)
{
    int found = -1;
    for (struct st_original **o = __start_st_originals; o && o < __stop_st_originals; o++) {
        if (strcmp((*o)->name, name) == 0) {
            __atomic_store_n(&(*o)->ptr, ptr, __ATOMIC_RELEASE);
            found = 0;
        }
    }
    return found;
}

void *st_original_wait(struct st_original *o)
{
    /* replaceFast made the wrapper live a moment before the agent could store the original */
    for (int i = 0; i < 20000; i++) {
        void *p = __atomic_load_n(&o->ptr, __ATOMIC_ACQUIRE);
        if (p)
            return p;
        if (i < 100)
            sched_yield();
        else
            usleep(100);
    }
    st_error("original", "original of %s never set; the call failed", o->name);
    return NULL;
}

/* st_now for callers outside the library (the agent's timestamps). */
ST_EXPORT uint64_t st_tsc(void) { return st_now(); }
