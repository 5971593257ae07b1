/* db_env.h on top of the runtime core (rt.h): how the doorbell path records, configures itself
 * and finds its live-block slots inside libsigmatrace_rt.so. */
#include <stdarg.h>
#include <stdio.h>
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

/* The effective value (config_keys.h): given, else SIGMATRACE_<KEY>, else the table's default. */
const char *db_config(const char *key) { return st_config_get(key); }
/* the doorbell path keeps its QP slots for the life of the process */
struct st_live_qp *db_live_qp(uint32_t qpn, uint32_t flags)
{
    st_live_hold();
    return st_live_qp(qpn, 1, flags);
}
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
