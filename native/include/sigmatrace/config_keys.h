/* config_keys.h: every key that st_init's configuration accepts, with its type, default and
 * meaning.  This is the one table of the runtime's settings:
 *  - the runtime applies the defaults from it (rt_init.c) and the doorbell files read their
 *    keys through it (db_config, st_config_default);
 *  - the runtime exports it as text (the symbol `st_config_keys`, one key per line, fields
 *    separated by tabs), which the command line reads for its options' help
 *    (sigmatrace/capture/config.py);
 *  - native/runtime/README.md shows it; tests/capture/test_config_keys.py checks the README,
 *    the command line and the runtime's behaviour against it.
 *
 * X(name, type, default, scope, meaning)
 *   type    "path", "pid", "bool" (0 or 1), "u32", "pow2" (a power of two), "cpus" (e.g. 2,3 or
 *           8-11), or the accepted words separated by "|"
 *   default the value used when the key is not given; "" for a key whose default is computed
 *           (the meaning says how)
 *   scope   "session": written by the controller for every session;
 *           "tuning": given only when the user sets it, else the default applies.  A tuning key
 *           not given to st_init is also read from SIGMATRACE_<KEY> in the traced program's
 *           environment (for experiments; the `runtime` cold event lists what came from there).
 *   meaning one line, no tab
 */
#ifndef SIGMATRACE_CONFIG_KEYS_H
#define SIGMATRACE_CONFIG_KEYS_H

#include <string.h>

#define ST_CONFIG_KEYS(X)                                                                          \
    X(dir, "path", "", "session", "this process's trace directory, pPID/ (required)")            \
    X(mode, "aggregate|simple|full", "simple", "session", "what is recorded per event")            \
    X(doorbells, "off|forward|wqe", "off", "session",                                             \
      "doorbells of GPUs and of CPU-written mlx5 queues: not substituted, forwarded and recorded, "   \
      "or also their WQEs recovered")                                                                \
    X(controller_pid, "pid", "0", "session",                                                       \
      "watched with pidfd_open; when it exits, tracing stops by itself (0: none)")                \
    X(attached, "bool", "0", "session", "1 when tracing began after the process started")         \
    X(ring_records, "pow2", "262144", "tuning",                                                    \
      "records per thread ring, 64..2^26: 12 MiB, 13 ms of records at 20 M/s")                    \
    X(flush_max_ms, "u32", "10", "tuning",                                                         \
      "the idle flusher's longest sleep (shorter than a ring takes to fill at 20 M/s)")           \
    X(wqe_batch, "u32", "128", "tuning",                                                           \
      "parse recovered WQEs once this many send-queue blocks wait (at most half of each ring)")   \
    X(wqe_copy_order, "adaptive|before|after", "", "tuning",                                       \
      "when a doorbell's blocks are copied against its forward; default adaptive, before where "  \
      "the machine has 4 CPUs or fewer")                                                           \
    X(wqe_copy_before_forward, "bool", "", "tuning",                                               \
      "older form of wqe_copy_order: 1 before, 0 after (wqe_copy_order wins)")                    \
    X(wqe_copy_after_quiet_us, "u32", "1", "tuning",                                               \
      "adaptive order: copy after the forward only when the page was quiet this long")            \
    X(wqe_copy_chunk, "u32", "1", "tuning", "copy once this many announced blocks wait")          \
    X(wqe_arm_blocks, "u32", "0", "tuning",                                                        \
      "queues in GPU memory: arm a copy of this many blocks while quiet (0: off)")                \
    X(wqe_arm_hold_us, "u32", "50", "tuning", "release an armed copy no doorbell fired after this long") \
    X(repeater_threads, "u32", "", "tuning",                                                       \
      "most repeater threads; default one per CPU of repeater_cpus, else 4")                      \
    X(repeater_cpus, "cpus", "", "tuning", "pin repeater threads to these CPUs (empty: not pinned)") \
    X(repeater_spin_us, "u32", "200", "tuning", "spin this long after the last doorbell")         \
    X(repeater_pause_us, "u32", "2000", "tuning", "then pause and yield until this long")         \
    X(repeater_sleep_us, "u32", "5", "tuning", "then sleep, starting this long")                  \
    X(repeater_max_sleep_us, "u32", "100", "tuning", "and doubling up to this long")              \
    X(repeater_yield, "bool", "", "tuning",                                                        \
      "yield every 64 polls while spinning; default 1 where the machine has 4 CPUs or fewer")     \
    X(repeater_caller_forward, "bool", "1", "tuning",                                              \
      "a UCT call that rang forwards its own doorbell (0: its page's repeater does)")

/* The default of `key` from the table, or NULL for a key the table does not have. */
static inline const char *st_config_default(const char *key)
{
#define ST_CONFIG_DEFAULT_OF(name, type, dflt, scope, meaning)                                     \
    if (strcmp(key, #name) == 0)                                                                   \
        return dflt;
    ST_CONFIG_KEYS(ST_CONFIG_DEFAULT_OF)
#undef ST_CONFIG_DEFAULT_OF
    return NULL;
}

/* Whether `key` is a tuning key of the table (given only when set; SIGMATRACE_<KEY> applies). */
static inline int st_config_is_tuning(const char *key)
{
#define ST_CONFIG_TUNING_OF(name, type, dflt, scope, meaning)                                      \
    if (strcmp(key, #name) == 0)                                                                   \
        return strcmp(scope, "tuning") == 0;
    ST_CONFIG_KEYS(ST_CONFIG_TUNING_OF)
#undef ST_CONFIG_TUNING_OF
    return 0;
}

#endif
