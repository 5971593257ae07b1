/* db_env.h for the C unit tests: records go to a callback the test installs (checked as they come,
 * so a million operations need no memory), cold events and errors to counters and stderr,
 * configuration from `key=value` strings the test sets, live slots from a private table. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_env.h"
#include "db_env_test.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct st_live_qp live_qps[ST_LIVE_MAX_QPS];
static uint32_t n_live_qps;
static struct st_live_repeater live_reps[ST_LIVE_MAX_REPEATERS];
static uint32_t n_live_reps;
static const char *cfg[64];
static int n_cfg;

struct test_env test_env = {.recording = 1, .records = 1};

int db_emit(const struct st_record *r)
{
    if (!test_env.recording)
        return 0;
    pthread_mutex_lock(&lock);
    test_env.emitted++;
    if (test_env.on_record)
        test_env.on_record(r);
    pthread_mutex_unlock(&lock);
    return 1;
}

int db_recording(void) { return __atomic_load_n(&test_env.recording, __ATOMIC_ACQUIRE); }
int db_records_wanted(void) { return db_recording() && test_env.records; }

void db_cold(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    __atomic_add_fetch(&test_env.cold_events, 1, __ATOMIC_RELAXED);
    if (test_env.verbose)
        fprintf(stderr, "cold: {%s}\n", buf);
}

void db_cold_at(uint64_t ts, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    (void)ts;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    __atomic_add_fetch(&test_env.cold_events, 1, __ATOMIC_RELAXED);
    if (test_env.verbose)
        fprintf(stderr, "cold: {%s}\n", buf);
}

void db_error(const char *where, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    __atomic_add_fetch(&test_env.errors, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "error (%s): %s\n", where, buf);
}

void test_env_config(const char *kv)
{
    if (n_cfg < 64)
        cfg[n_cfg++] = kv;
}

const char *db_config(const char *key)
{
    size_t n = strlen(key);
    for (int i = n_cfg - 1; i >= 0; i--)
        if (!strncmp(cfg[i], key, n) && cfg[i][n] == '=')
            return cfg[i] + n + 1;
    return NULL;
}

struct st_live_qp *db_live_qp(uint32_t qpn, uint32_t flags)
{
    pthread_mutex_lock(&lock);
    struct st_live_qp *q = NULL;
    for (uint32_t i = 0; i < n_live_qps; i++)
        if (live_qps[i].qpn == qpn)
            q = &live_qps[i];
    if (!q && n_live_qps < ST_LIVE_MAX_QPS) {
        q = &live_qps[n_live_qps++];
        q->qpn = qpn;
        q->repeater = UINT32_MAX;
        q->remote_qpn = UINT32_MAX;
    }
    if (q)
        q->flags |= flags;
    pthread_mutex_unlock(&lock);
    return q;
}

int db_live_repeater_alloc(void)
{
    pthread_mutex_lock(&lock);
    int i = n_live_reps < ST_LIVE_MAX_REPEATERS ? (int)n_live_reps++ : -1;
    pthread_mutex_unlock(&lock);
    return i;
}

struct st_live_repeater *db_live_repeater(int index) { return &live_reps[index]; }
struct st_live_qp *test_live_qp(uint32_t qpn)
{
    for (uint32_t i = 0; i < n_live_qps; i++)
        if (live_qps[i].qpn == qpn)
            return &live_qps[i];
    return NULL;
}

void db_thread_name(const char *name) { (void)name; }

int db_doorbell_mode(void)
{
    const char *m = db_config("doorbells");
    return !m || !strcmp(m, "wqe") ? ST_DB_WQE : !strcmp(m, "forward") ? ST_DB_FORWARD : ST_DB_OFF;
}

int db_on_stop(void (*fn)(int reason, void *arg), void *arg)
{
    test_env.stop_fn = fn;
    test_env.stop_arg = arg;
    return 0;
}

void db_mmio_store(volatile uint64_t *reg, uint64_t value)
{
    __atomic_store_n(reg, value, __ATOMIC_RELEASE);
    if (test_env.on_mmio)
        test_env.on_mmio(reg, value);
}
