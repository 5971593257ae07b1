/* Engine-to-engine transport: single-producer single-consumer byte rings in shared memory.
 *
 * Every emulated port (one per device per process) owns an inbox object in /dev/shm with a
 * few slots; a peer port that talks to it claims one slot, and then writes its requests
 * (SEND, WRITE, READ, ATOMIC) into the slot's request ring and its responses (ACK, NAK, READ
 * and ATOMIC responses) into the response ring.  Only the owning engine reads an inbox, so
 * each engine touches only its own process's memory.  Requests and responses travel in
 * separate rings so that consuming a response never waits for ring space: an engine whose
 * response ring toward a peer is full stops consuming that peer's requests, never the reverse.
 */
#ifndef SN_WIRE_H
#define SN_WIRE_H

#include <stdatomic.h>
#include <stdint.h>

#define SN_MSG_HDR 64u
#define SN_FRAG_MAX (32u * 1024u)       /* payload bytes per record */

enum sn_msg_type {
    SN_MSG_PAD = 0,         /* filler to the end of the ring */
    /* requests */
    SN_MSG_SEND = 1,        /* SEND, SEND_IMM, SEND_INVAL (opcode says which) */
    SN_MSG_WRITE = 2,       /* RDMA_WRITE, RDMA_WRITE_IMM */
    SN_MSG_READ = 3,        /* RDMA_READ request */
    SN_MSG_ATOMIC = 4,      /* ATOMIC_CS / ATOMIC_FA (8 bytes), ATOMIC_MASKED_CS / _FA: total
                             * is the operand size (4 or 8), arg0/arg1 swap_add/compare, and a
                             * masked one has 16 bytes of payload: swap mask (FA: the field
                             * boundary) and compare mask, host order */
    SN_MSG_UD = 5,          /* a UD datagram (SEND, SEND_IMM): rkey carries the Q_Key; with a
                             * GRH, raddr = SN_UD_GRH | tclass << 32 | hop limit << 24 | flow
                             * label and arg0/arg1 the sender's GID; nothing answers it */
    SN_MSG_DC_CONNECT = 6,  /* a DCI opens a connection to DCT dst_qpn: arg0 the DC access key,
                             * psn the first PSN it will use; nothing answers it (a refused
                             * connection's requests are dropped, as a DCT drops them) */
    /* responses */
    SN_MSG_ACK = 16,        /* everything up to and including psn was executed */
    SN_MSG_NAK = 17,        /* syndrome: SN_NAK_*; psn: the request refused */
    SN_MSG_READ_RESP = 18,  /* a fragment of read data for the request at psn */
    SN_MSG_ATOMIC_RESP = 19, /* arg0: the original value (host order, zero-extended) */
};

#define SN_UD_GRH (1ull << 63)

enum sn_msg_flags {
    SN_FIRST = 1,
    SN_LAST = 2,
    SN_SE = 4,              /* solicited event: the WQE asked for one (MLX5_WQE_CTRL_SOLICITED) */
};

/* NAK reasons (the IB AETH NAK codes, named for the completion they cause) */
enum sn_nak {
    SN_NAK_RNR = 1,         /* receiver not ready: retry after min_rnr_timer */
    SN_NAK_SEQ = 2,         /* PSN sequence error: resend from psn */
    SN_NAK_INV_REQ = 3,     /* -> IBV_WC_REM_INV_REQ_ERR */
    SN_NAK_ACCESS = 4,      /* -> IBV_WC_REM_ACCESS_ERR */
    SN_NAK_OP = 5,          /* -> IBV_WC_REM_OP_ERR */
};

struct sn_msg {
    uint8_t type;
    uint8_t flags;
    uint8_t opcode;         /* mlx5 WQE opcode of the request */
    uint8_t syndrome;       /* NAK reason; RNR: the responder's min_rnr_timer */
    uint32_t len;           /* payload bytes in this record */
    uint32_t src_qpn;
    uint32_t dst_qpn;
    uint32_t psn;           /* first PSN of the message (24 bits) */
    uint32_t imm;           /* immediate data, as in the WQE (big-endian) */
    uint32_t rkey;
    uint32_t total;         /* message length */
    uint64_t raddr;         /* remote address of the message start */
    uint32_t offset;        /* offset of this fragment in the message */
    uint16_t src_lid;
    uint16_t pad;
    uint64_t arg0;          /* atomic swap/add (host order), or the original value */
    uint64_t arg1;          /* atomic compare */
};
_Static_assert(sizeof(struct sn_msg) == SN_MSG_HDR, "wire header is one cache line");

struct sn_ring_ctl {
    _Atomic uint64_t head;  /* bytes produced; written by the producer only */
    uint8_t pad0[56];
    _Atomic uint64_t tail;  /* bytes consumed; written by the consumer only */
    uint8_t pad1[56];
};

/* A process-local handle to one ring (producer or consumer side). */
struct sn_ring {
    struct sn_ring_ctl *ctl;
    uint8_t *data;
    uint64_t size;          /* power of two */
    uint64_t cached;        /* producer: last tail seen; consumer: last head seen */
    uint64_t pos;           /* producer: head not yet published; consumer: tail */
};

static inline uint32_t sn_rec_bytes(uint32_t payload)
{
    return SN_MSG_HDR + ((payload + 63u) & ~63u);
}

void sn_ring_attach(struct sn_ring *r, struct sn_ring_ctl *ctl, uint8_t *data, uint64_t size,
                    int producer);
/* Producer: a record with room for PAYLOAD bytes, or NULL when the ring is full. */
struct sn_msg *sn_ring_reserve(struct sn_ring *r, uint32_t payload);
/* Producer: publish every record reserved so far. */
void sn_ring_publish(struct sn_ring *r);
/* Consumer: the next record, or NULL. */
struct sn_msg *sn_ring_peek(struct sn_ring *r);
/* Consumer: release the record returned by the last peek (visible to the producer at the
 * next sn_ring_release_publish). */
void sn_ring_consume(struct sn_ring *r, const struct sn_msg *m);
void sn_ring_release_publish(struct sn_ring *r);
/* Producer side: bytes free. */
uint64_t sn_ring_free(struct sn_ring *r);

#endif
