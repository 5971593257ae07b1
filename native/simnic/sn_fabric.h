/* The shared-memory "fabric": how emulated ports in different processes find each other.
 *
 *   /dev/shm/simnic.<uid>.host              LIDs (unique on the host) and QP numbers
 *   /dev/shm/simnic.<uid>.fab.<fabric>      the ports on one fabric: LID, GID, owner
 *   /dev/shm/simnic.<uid>.fab.<fabric>.<lid> the inbox of one port (rings, wake word)
 *
 * All are created 0600.  Registry updates take an flock on the object (released by the kernel
 * if the holder dies); entries name their owner by pid and start time, so entries of a dead
 * process are recognised and reclaimed.  The data path never takes a lock.
 */
#ifndef SN_FABRIC_H
#define SN_FABRIC_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "sn_wire.h"

#define SN_LID_FIRST 2                  /* LID 1 is the (virtual) subnet manager */
#define SN_LID_LIMIT 0xC000             /* unicast LIDs end at 0xBFFF */
#define SN_FABRIC_PORTS 512
#define SN_INBOX_SLOTS 16
#define SN_QPN_FIRST 0x100

struct sn_owner {
    int32_t pid;
    uint32_t pad;
    uint64_t start;                 /* /proc/<pid>/stat starttime: tells pid reuse apart */
};

struct sn_host_reg {
    uint64_t magic;
    uint32_t version;
    uint32_t lid_hint;
    _Atomic uint32_t next_qpn;
    _Atomic uint32_t next_key;
    uint32_t live;                  /* LIDs in use */
    uint32_t pad;
    struct sn_owner lid[SN_LID_LIMIT];
};

struct sn_fab_port {
    struct sn_owner owner;          /* pid 0: free */
    uint16_t lid;
    uint16_t dev;
    uint32_t gen;
    uint8_t gid[16];
};

struct sn_fabric_reg {
    uint64_t magic;
    uint32_t version;
    uint32_t pad;
    struct sn_fab_port port[SN_FABRIC_PORTS];
};

/* One slot of an inbox: the rings a given sender writes. */
struct sn_slot {
    _Atomic uint32_t state;         /* 0 free, 1 claimed (being set up), 2 ready */
    uint16_t sender_lid;
    uint16_t pad;
    struct sn_owner sender;
    uint8_t pad1[40];
    struct sn_ring_ctl req;
    struct sn_ring_ctl resp;
};

struct sn_inbox {
    uint64_t magic;
    uint32_t version;
    uint16_t lid;
    uint16_t pad;
    struct sn_owner owner;
    uint64_t ring_bytes;            /* size of each ring */
    uint8_t pad1[24];
    _Atomic uint32_t wake_seq;      /* futex word (shared) */
    _Atomic uint32_t sleeping;      /* the engine is (about to be) asleep on wake_seq */
    uint8_t pad2[56];
    struct sn_slot slot[SN_INBOX_SLOTS];
    /* followed by SN_INBOX_SLOTS x (request ring, response ring) data areas */
};

static inline uint8_t *sn_inbox_ring_data(struct sn_inbox *ib, int slot, int resp)
{
    return (uint8_t *)ib + sizeof(*ib) + ((uint64_t)slot * 2 + (resp ? 1 : 0)) * ib->ring_bytes;
}

/* process identity */
uint64_t sn_proc_start_time(pid_t pid);
int sn_owner_alive(const struct sn_owner *o);
void sn_owner_self(struct sn_owner *o);

/* host registry */
int sn_host_open(void);                         /* maps it once per process */
int sn_lid_alloc(uint16_t *lid);
void sn_lid_free(uint16_t lid);
uint32_t sn_qpn_alloc(void);
uint32_t sn_key_alloc(void);

/* fabric */
const char *sn_fabric_name(void);
int sn_fabric_join(uint16_t lid, uint16_t dev, const uint8_t gid[16]);
void sn_fabric_leave(uint16_t lid);
/* Finds the live port with LID (when lid != 0) or GID; fills lid and owner. */
int sn_fabric_lookup(uint16_t lid, const uint8_t *gid, uint16_t *lid_out,
                     struct sn_owner *owner_out);

/* inboxes */
struct sn_inbox *sn_inbox_create(uint16_t lid, uint64_t ring_bytes, size_t *map_len);
void sn_inbox_destroy(struct sn_inbox *ib, size_t map_len, uint16_t lid);
/* Only the inbox's name: peers no longer find it; this process keeps its mapping. */
void sn_inbox_unlink(uint16_t lid);
struct sn_inbox *sn_inbox_map(uint16_t lid, size_t *map_len);
/* Claims (or finds the existing) slot for sender LID in IB; -1 when none is free. */
int sn_inbox_claim(struct sn_inbox *ib, uint16_t sender_lid);

void sn_futex_wake(_Atomic uint32_t *word);
void sn_futex_wait(_Atomic uint32_t *word, uint32_t val, long timeout_ns);

#endif
