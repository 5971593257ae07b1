/* The test implementation of db_env.h (db_env_test.c) and what a test controls through it. */
#ifndef DB_ENV_TEST_H
#define DB_ENV_TEST_H

#include <stdint.h>

#include <sigmatrace/live.h>
#include <sigmatrace/records.h>

struct test_env {
    volatile int recording;  /* db_recording() */
    int records;             /* 0: aggregate mode (counters only) */
    int verbose;
    void (*on_record)(const struct st_record *r); /* called under a lock, in emit order */
    uint64_t emitted, cold_events, errors;
    /* the NIC model: each store to a doorbell register, on the storing thread (NULL: memory) */
    void (*on_mmio)(volatile uint64_t *reg, uint64_t value);
    void (*stop_fn)(int reason, void *arg);
    void *stop_arg;
};
extern struct test_env test_env;

void test_env_config(const char *kv); /* "key=value", kept by pointer */
struct st_live_qp *test_live_qp(uint32_t qpn);

#endif
