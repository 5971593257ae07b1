/* fi_abi.h: the parts of libfabric's 1.x ABI the libfabric hooks read and replace, declared here
 * so that the runtime builds without libfabric's headers (and follows the library the program
 * loaded, whichever 1.x it is).
 *
 * Every object starts with a `struct fid` and points at tables of functions ("ops"), each table
 * starting with its own size in bytes: a table of an older library is shorter, so a slot is used
 * only when it lies inside that size.  Only the slot order matters here; argument types are the
 * library's (pointers, size_t, uint64_t, enums as int).
 */
#ifndef SIGMATRACE_FI_ABI_H
#define SIGMATRACE_FI_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef uint64_t fi_addr_t;
#define FI_ADDR_NONE ((fi_addr_t)-1) /* FI_ADDR_UNSPEC / FI_ADDR_NOTAVAIL */

/* enum fi_ep_type */
enum { FI_ABI_EP_UNSPEC, FI_ABI_EP_MSG, FI_ABI_EP_DGRAM, FI_ABI_EP_RDM };

/* address formats (fi_info.addr_format) */
enum {
    FI_ABI_FORMAT_UNSPEC = 0,
    FI_ABI_SOCKADDR = 1,
    FI_ABI_SOCKADDR_IN = 2,
    FI_ABI_SOCKADDR_IN6 = 3,
    FI_ABI_SOCKADDR_IB = 4,
    FI_ABI_ADDR_STR = 9,
    FI_ABI_ADDR_IB_UD = 11,
};

struct fi_abi_ops { /* struct fi_ops: every fid's */
    size_t size;
    int (*close)(void *fid);
    int (*bind)(void *fid, void *bfid, uint64_t flags);
    int (*control)(void *fid, int command, void *arg);
    void *ops_open, *tostr, *ops_set;
};

struct fi_abi_fid {
    size_t fclass;
    void *context;
    struct fi_abi_ops *ops;
};

struct fi_abi_fabric_attr {
    void *fabric;
    char *name;
    char *prov_name;
    uint32_t prov_version, api_version;
};

struct fi_abi_ep_attr {
    int type; /* enum fi_ep_type */
    uint32_t protocol, protocol_version;
    size_t max_msg_size;
};

struct fi_abi_domain_attr {
    void *domain;
    char *name;
};

struct fi_abi_info {
    struct fi_abi_info *next;
    uint64_t caps, mode;
    uint32_t addr_format;
    size_t src_addrlen, dest_addrlen;
    void *src_addr, *dest_addr;
    void *handle;
    void *tx_attr, *rx_attr;
    struct fi_abi_ep_attr *ep_attr;
    struct fi_abi_domain_attr *domain_attr;
    struct fi_abi_fabric_attr *fabric_attr;
    void *nic;
};

/* Objects: a fid, then table pointers.  The hooks replace those pointers (aligned 8-byte stores). */
struct fi_abi_fabric {
    struct fi_abi_fid fid;
    void *ops; /* fi_ops_fabric: size, domain, passive_ep, eq_open, wait_open, trywait, domain2 */
    uint32_t api_version;
};

struct fi_abi_domain {
    struct fi_abi_fid fid;
    void *ops; /* fi_ops_domain: size, av_open, cq_open, endpoint, scalable_ep, cntr_open,
                * poll_open, stx_ctx, srx_ctx, query_atomic, query_collective, endpoint2 */
    void *mr;
};

struct fi_abi_av {
    struct fi_abi_fid fid;
    void *ops; /* fi_ops_av: size, insert, insertsvc, insertsym, remove, lookup, straddr, av_set */
};

struct fi_abi_ep {
    struct fi_abi_fid fid;
    void *ops;    /* fi_ops_ep: size, cancel, getopt, setopt, tx_ctx, rx_ctx, rx_size_left, ... */
    void *cm;     /* fi_ops_cm: size, setname, getname, getpeer, connect, listen, accept, ... */
    void *msg;    /* fi_ops_msg */
    void *rma;    /* fi_ops_rma */
    void *tagged; /* fi_ops_tagged */
    void *atomic; /* fi_ops_atomic */
};

/* Slot numbers (8-byte words after the size word) of the tables above. */
enum { FI_SLOT_FABRIC_DOMAIN = 1, FI_SLOT_FABRIC_DOMAIN2 = 6 };
enum { FI_SLOT_DOMAIN_AV_OPEN = 1, FI_SLOT_DOMAIN_ENDPOINT = 3, FI_SLOT_DOMAIN_SCALABLE_EP = 4,
       FI_SLOT_DOMAIN_SRX_CTX = 8, FI_SLOT_DOMAIN_ENDPOINT2 = 11 };
enum { FI_SLOT_AV_INSERT = 1, FI_SLOT_AV_INSERTSVC = 2, FI_SLOT_AV_INSERTSYM = 3, FI_SLOT_AV_LOOKUP = 5 };
enum { FI_SLOT_FID_CLOSE = 1, FI_SLOT_FID_BIND = 2, FI_SLOT_FID_CONTROL = 3 };
enum { FI_SLOT_EP_SETOPT = 3, FI_SLOT_EP_TX_CTX = 4, FI_SLOT_EP_RX_CTX = 5 };
enum { FI_SLOT_CM_GETPEER = 3, FI_SLOT_CM_CONNECT = 4, FI_SLOT_CM_ACCEPT = 6 };

/* Message descriptions of the *msg calls. */
struct fi_abi_msg {
    const struct iovec *msg_iov;
    void **desc;
    size_t iov_count;
    fi_addr_t addr;
    void *context;
    uint64_t data;
};

struct fi_abi_rma_iov {
    uint64_t addr;
    size_t len;
    uint64_t key;
};

struct fi_abi_msg_rma {
    const struct iovec *msg_iov;
    void **desc;
    size_t iov_count;
    fi_addr_t addr;
    const struct fi_abi_rma_iov *rma_iov;
    size_t rma_iov_count;
    void *context;
    uint64_t data;
};

struct fi_abi_msg_tagged {
    const struct iovec *msg_iov;
    void **desc;
    size_t iov_count;
    fi_addr_t addr;
    uint64_t tag, ignore;
    void *context;
    uint64_t data;
};

struct fi_abi_ioc {
    void *addr;
    size_t count;
};

struct fi_abi_rma_ioc {
    uint64_t addr;
    size_t count;
    uint64_t key;
};

struct fi_abi_msg_atomic {
    const struct fi_abi_ioc *msg_iov;
    void **desc;
    size_t iov_count;
    fi_addr_t addr;
    const struct fi_abi_rma_ioc *rma_iov;
    size_t rma_iov_count;
    int datatype, op;
    void *context;
    uint64_t data;
};

/* The verbs provider's datagram address (FI_ADDR_IB_UD): 32 bytes. */
struct fi_abi_ib_ud_name {
    uint8_t gid[16];
    uint32_t qpn;
    uint16_t lid, pkey, service;
    uint8_t sl, pad[5];
};

#endif
