/* Cold events: cold.jsonl, one JSON object per line, appended with one write() per line on an
 * O_APPEND descriptor, so lines from several threads never interleave. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"

#define ST_COLD_MAX 16384

static int st_cold_fd = -1;
static uint64_t st_cold_n, st_cold_dropped;

int st_cold_open(const char *dir)
{
    (void)dir; /* created in the session's directory, held open (rt_dirs.c) */
    st_cold_n = st_cold_dropped = 0;
    int fd = st_create_file(st_dir_fd(), "cold.jsonl", O_WRONLY | O_APPEND);
    if (fd < 0)
        return -1;
    __atomic_store_n(&st_cold_fd, fd, __ATOMIC_RELEASE);
    return 0;
}

void st_cold_close(void)
{
    int fd = __atomic_exchange_n(&st_cold_fd, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0)
        close(fd);
}

uint64_t st_cold_count(void) { return __atomic_load_n(&st_cold_n, __ATOMIC_RELAXED); }
uint64_t st_cold_drop_count(void) { return __atomic_load_n(&st_cold_dropped, __ATOMIC_RELAXED); }

static void st_cold_line(uint64_t ts, const char *fields, size_t flen)
{
    int fd = __atomic_load_n(&st_cold_fd, __ATOMIC_ACQUIRE);
    if (fd < 0)
        return;
    char line[ST_COLD_MAX + 64];
    int n = snprintf(line, 64, "{\"ts\":%llu,\"tid\":%u,", (unsigned long long)ts, st_gettid());
    if (flen > ST_COLD_MAX) {
        __atomic_fetch_add(&st_cold_dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    memcpy(line + n, fields, flen);
    n += (int)flen;
    line[n++] = '}';
    line[n++] = '\n';
    ssize_t w;
    do
        w = write(fd, line, (size_t)n);
    while (w < 0 && errno == EINTR);
    if (w == n)
        __atomic_fetch_add(&st_cold_n, 1, __ATOMIC_RELAXED);
    else
        __atomic_fetch_add(&st_cold_dropped, 1, __ATOMIC_RELAXED);
}

ST_EXPORT void st_cold(uint64_t ts, const char *json_fields)
{
    if (!json_fields)
        return;
    st_cold_line(ts, json_fields, strlen(json_fields));
}

void st_coldf(uint64_t ts, const char *fmt, ...)
{
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(buf)) {
        __atomic_fetch_add(&st_cold_dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    st_cold_line(ts, buf, (size_t)n);
}

size_t st_json_str(char *out, size_t n, const char *s)
{
    size_t o = 0;
    if (n < 3)
        return 0;
    out[o++] = '"';
    for (; s && *s && o + 8 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, n - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = 0;
    return o;
}

static uint64_t st_errors;
static char st_last_err[1200];

ST_EXPORT const char *st_last_error(void) { return st_last_err; }

void st_error(const char *where, const char *fmt, ...)
{
    char msg[1024], jw[160], jm[2100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    __atomic_fetch_add(&st_errors, 1, __ATOMIC_RELAXED);
    snprintf(st_last_err, sizeof(st_last_err), "%s: %s", where, msg);
    st_json_str(jw, sizeof(jw), where);
    st_json_str(jm, sizeof(jm), msg);
    st_coldf(st_now(), "\"ev\":\"error\",\"where\":%s,\"msg\":%s", jw, jm);
}
