/* What the kernel checks when it pins a user range for a memory region (ib_umem_get): every
 * page is mapped and readable, and writable when the registration allows any write (local
 * write, remote write or atomic, memory-window binding: the pages are pinned for writing
 * then).  A ConnectX registration of anything else fails with EFAULT; the emulated NIC checks
 * the same at registration time, so that a bad range is refused there instead of faulting
 * the engine (and the program) at the first access. */
#include <stdio.h>
#include <stdlib.h>

#include "sn_verbs.h"

#define WRITABLE_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
                         IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)

int sn_range_pinnable(const void *addr, size_t len, unsigned access)
{
    uintptr_t cur = (uintptr_t)addr, end = cur + len;
    int writable = !!(access & WRITABLE_ACCESS), ok = 0;
    char line[512];
    FILE *maps;

    if (!len)
        return 1;
    if (end < cur)
        return 0;
    maps = fopen("/proc/self/maps", "re");
    if (!maps)
        return 1;       /* no procfs: nothing to check against, as before */
    /* lines are sorted by address: walk them while they cover [cur, end) without a gap */
    while (fgets(line, sizeof(line), maps)) {
        unsigned long lo, hi;
        char perms[5];

        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 || hi <= cur)
            continue;
        if (lo > cur || perms[0] != 'r' || (writable && perms[1] != 'w'))
            break;
        cur = hi;
        if (cur >= end) {
            ok = 1;
            break;
        }
    }
    fclose(maps);
    return ok;
}
