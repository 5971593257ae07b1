/* One-line diagnostics of the emulated NIC on stderr ("simnic: ..."); sn_dbg only with
 * SIMNIC_DEBUG=1 in the environment. */
#ifndef SN_LOG_H
#define SN_LOG_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern int sn_debug_enabled;

#define sn_log(fmt, ...) fprintf(stderr, "simnic: " fmt "\n", ##__VA_ARGS__)
#define sn_dbg(fmt, ...)                                                          \
    do {                                                                          \
        if (sn_debug_enabled)                                                     \
            fprintf(stderr, "simnic[%d]: " fmt "\n", (int)getpid(),               \
                    ##__VA_ARGS__);                                               \
    } while (0)

#endif
