/* db_env.h on top of the runtime core (rt.h): how the doorbell path records, configures itself
 * and finds its live-block slots inside libsigmatrace_rt.so. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_env.h"
#include "rt.h"

int db_emit(const struct st_record *r) { return st_emit(r); }
int db_recording(void) { return st_recording(); }
int db_records_wanted(void) { return st_recording() && st_g.mode != ST_MODE_AGGREGATE; }

void db_cold(const char *fmt, ...)
{
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    st_cold(st_now(), buf);
}

void db_cold_at(uint64_t ts, const char *fmt, ...)
{
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    st_cold(ts, buf);
}

void db_error(const char *where, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    st_error(where, "%s", buf);
}

/* A key given to st_init, else SIGMATRACE_<KEY> in the traced program's environment (for
 * experiments with the repeater's settings that have no command-line option). */
const char *db_config(const char *key)
{
    const char *v = st_config_get(key);
    if (v)
        return v;
    char name[96] = "SIGMATRACE_";
    size_t n = strlen(name);
    for (const char *k = key; *k && n + 1 < sizeof(name); k++)
        name[n++] = (char)((*k >= 'a' && *k <= 'z') ? *k - 32 : *k);
    name[n] = 0;
    return getenv(name);
}
struct st_live_qp *db_live_qp(uint32_t qpn, uint32_t flags) { return st_live_qp(qpn, 1, flags); }
int db_live_repeater_alloc(void) { return st_live_repeater_alloc(); }
struct st_live_repeater *db_live_repeater(int index) { return st_live_repeater(index); }
void db_thread_name(const char *name) { st_thread_name(name); }
int db_on_stop(void (*fn)(int reason, void *arg), void *arg) { return st_on_stop(fn, arg); }
int db_doorbell_mode(void) { return st_config()->doorbells; }

void db_mmio_store(volatile uint64_t *reg, uint64_t value)
{
    __atomic_store_n(reg, value, __ATOMIC_RELAXED);
    __builtin_ia32_sfence();
}
