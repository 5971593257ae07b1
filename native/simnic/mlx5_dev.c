/* The emulated mlx5 provider: registration with libibverbs, devices, contexts, queries,
 * emulated sysfs files, UAR pages, asynchronous events.
 *
 * Devices: SIMNIC_DEVICES (default 1, at most 8) HCAs named mlx5_0.., one InfiniBand port
 * each, ACTIVE.  Each process's instance of a device is its own HCA on the fabric (its own
 * LID, node GUID and GID, unique on the host), created when the device list is first read.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sn_export.h"
#include "sn_provider.h"
#include "sn_verbs.h"

#define VENDOR_ID 0x02c9                /* Mellanox */
#define VENDOR_PART_ID 4129             /* ConnectX-7 */
#define FW_VER "28.39.1002"
#define BOARD_ID "MT_0000000838"
#define GUID_PREFIX 0x98039b0300000000ull

int sn_ndevices;
struct sn_device *sn_devices[SN_MAX_DEVICES];
static pthread_mutex_t g_dev_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- devices ---------------------------------------------------------------------------------- */

static int ndevices_wanted(void)
{
    const char *env = getenv("SIMNIC_DEVICES");
    long n = 1;

    if (env && *env) {
        char *end;

        n = strtol(env, &end, 10);
        if (*end || n < 0 || n > SN_MAX_DEVICES) {
            sn_log("SIMNIC_DEVICES=%s is not a number from 0 to %d; using 1", env,
                   SN_MAX_DEVICES);
            n = 1;
        }
    }
    return (int)n;
}

static int create_devices(void)
{
    int want = ndevices_wanted(), err;

    if (want && (err = sn_host_open())) {
        sn_log("cannot open the host registry in /dev/shm: %s", strerror(-err));
        return 0;
    }
    for (int i = 0; i < want; i++) {
        struct sn_device *d = calloc(1, sizeof(*d));
        uint64_t gid_if;

        if (!d)
            break;
        if ((err = sn_lid_alloc(&d->lid))) {
            sn_log("no LID for mlx5_%d: %s", i, strerror(-err));
            free(d);
            break;
        }
        d->index = i;
        d->guid = GUID_PREFIX | (uint64_t)d->lid << 8 | (uint64_t)i;
        d->gid.global.subnet_prefix = htobe64(0xfe80000000000000ull);
        gid_if = d->guid;
        d->gid.global.interface_id = htobe64(gid_if);
        d->ibdev.node_type = IBV_NODE_CA;
        d->ibdev.transport_type = IBV_TRANSPORT_IB;
        snprintf(d->ibdev.name, sizeof(d->ibdev.name), "mlx5_%d", i);
        snprintf(d->ibdev.dev_name, sizeof(d->ibdev.dev_name), "uverbs%d", i);
        snprintf(d->ibdev.dev_path, sizeof(d->ibdev.dev_path),
                 "/sys/class/infiniband_verbs/uverbs%d", i);
        snprintf(d->ibdev.ibdev_path, sizeof(d->ibdev.ibdev_path), "/sys/class/infiniband/mlx5_%d",
                 i);
        sn_devices[sn_ndevices++] = d;
    }
    return 0;
}

/* The devices belong to the process that created them: a forked child is another node on
 * the fabric and gets its own (the parent's contexts are unusable there, as with hardware). */
static pid_t g_devs_pid;

static void after_fork_child(void)
{
    pthread_mutex_init(&g_dev_lock, NULL);
    sn_fork_child_reset();
}

struct ibv_device **sn_get_device_list(int *num)
{
    struct ibv_device **list;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    void install_atfork(void);

    pthread_once(&once, install_atfork);
    pthread_mutex_lock(&g_dev_lock);
    if (g_devs_pid != getpid()) {
        sn_ndevices = 0;        /* inherited across fork: not ours */
        memset(sn_devices, 0, sizeof(sn_devices));
        g_devs_pid = getpid();
        create_devices();
    }
    pthread_mutex_unlock(&g_dev_lock);
    list = calloc((size_t)sn_ndevices + 1, sizeof(*list));
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    for (int i = 0; i < sn_ndevices; i++)
        list[i] = &sn_devices[i]->ibdev;
    if (num)
        *num = sn_ndevices;
    return list;
}

void install_atfork(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}

int sn_devices_are_ours(void)
{
    return g_devs_pid == getpid();
}

/* At exit: stop the engines of contexts the program never closed, leave the fabric, give back
 * the LIDs. */
__attribute__((destructor)) static void devices_at_exit(void)
{
    if (!sn_devices_are_ours())
        return; /* a forked child that never opened a device: nothing here is its own */
    for (int i = 0; i < sn_ndevices; i++) {
        struct sn_device *dev = sn_devices[i];

        if (!dev)
            continue;
        sn_engine_shutdown(dev);
        if (dev->lid)
            sn_lid_free(dev->lid);
        dev->lid = 0;
    }
}

static struct sn_device *to_sdev(struct ibv_device *d)
{
    for (int i = 0; i < sn_ndevices; i++)
        if (&sn_devices[i]->ibdev == d)
            return sn_devices[i];
    return NULL;
}

int sn_is_our_device(struct ibv_device *d)
{
    return to_sdev(d) != NULL;
}

static __be64 device_guid(struct ibv_device *d)
{
    struct sn_device *sd = to_sdev(d);

    return sd ? htobe64(sd->guid) : 0;
}

static int device_index(struct ibv_device *d)
{
    struct sn_device *sd = to_sdev(d);

    return sd ? sd->index : -1;
}

static void guid_str(uint64_t g, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
             (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
}

/* The sysfs files tools read for an emulated device (ibv_read_sysfs_file). */
static int read_sysfs(const char *dir, const char *file, char *buf, size_t size)
{
    char val[256] = "";
    int found = 0;

    for (int i = 0; i < sn_ndevices && !found; i++) {
        struct sn_device *d = sn_devices[i];

        if (!strcmp(dir, d->ibdev.ibdev_path)) {
            found = 1;
            if (!strcmp(file, "node_type"))
                snprintf(val, sizeof(val), "1: CA");
            else if (!strcmp(file, "fw_ver"))
                snprintf(val, sizeof(val), FW_VER);
            else if (!strcmp(file, "board_id"))
                snprintf(val, sizeof(val), BOARD_ID);
            else if (!strcmp(file, "hca_type"))
                snprintf(val, sizeof(val), "MT%d", VENDOR_PART_ID);
            else if (!strcmp(file, "hw_rev"))
                snprintf(val, sizeof(val), "0x0");
            else if (!strcmp(file, "node_guid") || !strcmp(file, "sys_image_guid"))
                guid_str(d->guid, val, sizeof(val));
            else if (!strcmp(file, "node_desc"))
                snprintf(val, sizeof(val), "simnic %s", d->ibdev.name);
            else if (!strcmp(file, "ports/1/lid"))
                snprintf(val, sizeof(val), "0x%x", d->lid);
            else if (!strcmp(file, "ports/1/sm_lid"))
                snprintf(val, sizeof(val), "0x1");
            else if (!strcmp(file, "ports/1/lid_mask_count") || !strcmp(file, "ports/1/sm_sl"))
                snprintf(val, sizeof(val), "0");
            else if (!strcmp(file, "ports/1/state"))
                snprintf(val, sizeof(val), "4: ACTIVE");
            else if (!strcmp(file, "ports/1/phys_state"))
                snprintf(val, sizeof(val), "5: LinkUp");
            else if (!strcmp(file, "ports/1/link_layer"))
                snprintf(val, sizeof(val), "InfiniBand");
            else if (!strcmp(file, "ports/1/rate"))
                snprintf(val, sizeof(val), "400 Gb/sec (4X NDR)");
            else if (!strcmp(file, "ports/1/gid_attrs/types/0"))
                snprintf(val, sizeof(val), "IB/RoCE v1");
            else if (!strcmp(file, "ports/1/gids/0")) {
                const uint8_t *g = d->gid.raw;

                snprintf(val, sizeof(val),
                         "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
                         g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9],
                         g[10], g[11], g[12], g[13], g[14], g[15]);
            } else
                found = 2;
        } else if (!strcmp(dir, d->ibdev.dev_path)) {
            found = 1;
            if (!strcmp(file, "ibdev"))
                snprintf(val, sizeof(val), "%s", d->ibdev.name);
            else if (!strcmp(file, "abi_version"))
                snprintf(val, sizeof(val), "1");
            else
                found = 2;
        }
    }
    if (found != 1) {
        errno = ENOENT;
        return -1;
    }
    if (!size)
        return 0;
    snprintf(buf, size, "%s", val);
    return (int)(strlen(val) < size ? strlen(val) : size - 1);
}

/* ---- UAR pages -------------------------------------------------------------------------------- */

struct sn_uar *sn_uar_alloc(struct sn_context *ctx, int devx)
{
    struct sn_uar *u = calloc(1, sizeof(*u));

    if (!u)
        return NULL;
    /* a page of its own, as a UAR mapping is: CUDA may register it.  Like rdma-core's mapping of
     * the device file, it is a shared mapping of a named file (/proc/PID/maps shows
     * /memfd:simnic-uar, as it shows /dev/infiniband/uverbsN on hardware) kept out of children
     * made by fork. */
    u->page = MAP_FAILED;
    int fd = memfd_create("simnic-uar", MFD_CLOEXEC);
    if (fd >= 0) {
        if (ftruncate(fd, SN_PAGE) == 0)
            u->page = mmap(NULL, SN_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
    }
    if (u->page == MAP_FAILED) /* no memfd here: an anonymous page does the same job */
        u->page = mmap(NULL, SN_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (u->page == MAP_FAILED) {
        free(u);
        return NULL;
    }
    madvise(u->page, SN_PAGE, MADV_DONTFORK);
    u->devx = devx;
    pthread_mutex_lock(&ctx->eng->lock);
    u->page_id = ctx->eng->next_uar_id++;
    sn_engine_add_uar(ctx->eng, u);
    pthread_mutex_unlock(&ctx->eng->lock);
    pthread_mutex_lock(&ctx->lock);
    u->cnext = ctx->uars;
    ctx->uars = u;
    pthread_mutex_unlock(&ctx->lock);
    return u;
}

void sn_uar_free(struct sn_context *ctx, struct sn_uar *u)
{
    pthread_mutex_lock(&ctx->eng->lock);
    sn_engine_del_uar(ctx->eng, u);
    pthread_mutex_unlock(&ctx->eng->lock);
    pthread_mutex_lock(&ctx->lock);
    for (struct sn_uar **pp = &ctx->uars; *pp; pp = &(*pp)->cnext)
        if (*pp == u) {
            *pp = u->cnext;
            break;
        }
    pthread_mutex_unlock(&ctx->lock);
    munmap(u->page, SN_PAGE);
    free(u);
}

/* ---- user-index table (CQE -> QP / SRQ when polling) ------------------------------------------ */

int sn_uidx_alloc(struct sn_context *ctx, void *rsc)
{
    int ret = -1;

    pthread_mutex_lock(&ctx->lock);
    for (uint32_t n = 0; n < SN_UIDX_L1 * SN_UIDX_L2; n++) {
        uint32_t i = (ctx->next_uidx + n) % (SN_UIDX_L1 * SN_UIDX_L2);
        void **l2;

        if (i == 0)
            continue;
        l2 = ctx->uidx[i >> 12];
        if (!l2) {
            l2 = calloc(SN_UIDX_L2, sizeof(*l2));
            if (!l2)
                break;
            ctx->uidx[i >> 12] = l2;
        }
        if (l2[i & (SN_UIDX_L2 - 1)])
            continue;
        l2[i & (SN_UIDX_L2 - 1)] = rsc;
        ctx->next_uidx = i + 1;
        ret = (int)i;
        break;
    }
    pthread_mutex_unlock(&ctx->lock);
    return ret;
}

void sn_uidx_free(struct sn_context *ctx, uint32_t uidx)
{
    pthread_mutex_lock(&ctx->lock);
    if (ctx->uidx[uidx >> 12])
        ctx->uidx[uidx >> 12][uidx & (SN_UIDX_L2 - 1)] = NULL;
    pthread_mutex_unlock(&ctx->lock);
}

/* ---- queries ---------------------------------------------------------------------------------- */

static void fill_device_attr(struct sn_device *d, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), FW_VER);
    a->node_guid = htobe64(d->guid);
    a->sys_image_guid = htobe64(d->guid);
    a->max_mr_size = ~0ull;
    a->page_size_cap = 0xfffffffffffff000ull;
    a->vendor_id = VENDOR_ID;
    a->vendor_part_id = VENDOR_PART_ID;
    a->hw_ver = 0;
    a->max_qp = 1 << 17;
    a->max_qp_wr = SN_MAX_WR;
    a->device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR |
                          IBV_DEVICE_AUTO_PATH_MIG | IBV_DEVICE_CHANGE_PHY_PORT |
                          IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
                          IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_N_NOTIFY_CQ;
    a->max_sge = SN_MAX_SEND_SGE;
    a->max_sge_rd = SN_MAX_SEND_SGE;
    a->max_cq = 1 << 24;
    a->max_cqe = SN_MAX_CQE;
    a->max_mr = 1 << 24;
    a->max_pd = 1 << 23;
    a->max_qp_rd_atom = 16;
    a->max_res_rd_atom = 1 << 21;
    a->max_qp_init_rd_atom = 16;
    a->atomic_cap = IBV_ATOMIC_HCA;
    a->max_srq = 1 << 23;
    a->max_srq_wr = SN_MAX_WR - 1;
    a->max_srq_sge = SN_MAX_RECV_SGE;
    a->max_pkeys = 128;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = 1;
}

int sn_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    fill_device_attr(to_sctx(ctx)->dev, attr);
    return 0;
}

static int query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
                           struct ibv_device_attr_ex *attr, size_t size)
{
    struct ibv_device_attr_ex a;

    if ((in && in->comp_mask) || size < sizeof(a.orig_attr))
        return EINVAL;
    memset(&a, 0, sizeof(a));
    fill_device_attr(to_sctx(ctx)->dev, &a.orig_attr);
    /* the kernel reports all 64 bits; the low 32 are the legacy flags */
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
    a.completion_timestamp_mask = 0x7fffffffffffffffull;
    a.hca_core_clock = 1000000;     /* kHz: completion timestamps count nanoseconds */
    a.max_dm_size = 0;
    a.pci_atomic_caps.fetch_add = IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP;
    a.pci_atomic_caps.swap = IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP;
    a.pci_atomic_caps.compare_swap = IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP;
    a.phys_port_cnt_ex = 1;
    if (size > sizeof(a))   /* a newer rdma-core's struct: what this device does not know is 0 */
        memset(attr, 0, size);
    memcpy(attr, &a, size < sizeof(a) ? size : sizeof(a));
    return 0;
}

/* Hands A to a caller whose struct ibv_port_attr is LEN bytes, as rdma-core's libibverbs does:
 * a shorter (older) struct gets its prefix; a longer one (a program built against a newer
 * rdma-core) is zeroed first.  rdma-core 47 and later have `uint32_t active_speed_ex` at byte
 * 52 (the kernel reports the speed there too; NDR fits in active_speed as well). */
#define PORT_ATTR_SPEED_EX_OFF 52

static void sn_port_attr_copy(struct ibv_port_attr *attr, size_t len, const struct ibv_port_attr *a)
{
    if (len > sizeof(*a))
        memset(attr, 0, len);
    memcpy(attr, a, len < sizeof(*a) ? len : sizeof(*a));
    if (len >= PORT_ATTR_SPEED_EX_OFF + sizeof(uint32_t)) {
        uint32_t speed_ex = a->active_speed;

        memcpy((char *)attr + PORT_ATTR_SPEED_EX_OFF, &speed_ex, sizeof(speed_ex));
    }
}

int sn_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
    struct sn_device *d = to_sctx(ctx)->dev;
    struct ibv_port_attr a;

    if (port != 1)
        return EINVAL;
    memset(&a, 0, sizeof(a));
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = IBV_MTU_4096;
    a.active_mtu = IBV_MTU_4096;
    a.gid_tbl_len = 128;
    a.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP | IBV_PORT_VENDOR_CLASS_SUP |
                       IBV_PORT_SYS_IMAGE_GUID_SUP | IBV_PORT_EXTENDED_SPEEDS_SUP |
                       IBV_PORT_CAP_MASK2_SUP;
    a.max_msg_sz = SN_MAX_MSG;
    a.pkey_tbl_len = 128;
    a.lid = d->lid;
    a.sm_lid = 1;
    a.lmc = 0;
    a.max_vl_num = 4;
    a.sm_sl = 0;
    a.subnet_timeout = 18;
    a.active_width = 2;     /* 4X */
    a.active_speed = 128;   /* NDR */
    a.phys_state = 5;       /* LinkUp */
    a.link_layer = IBV_LINK_LAYER_INFINIBAND;
    a.port_cap_flags2 = IBV_PORT_LINK_SPEED_NDR_SUP;
    sn_port_attr_copy(attr, len, &a);
    return 0;
}

static int query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
    if (port != 1 || index < 0 || index >= 128) {
        errno = EINVAL;
        return -1;
    }
    memset(gid, 0, sizeof(*gid));
    if (index == 0)
        *gid = to_sctx(ctx)->dev->gid;
    return 0;
}

static int query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
    struct ibv_gid_entry e;

    if (flags || port != 1 || size < sizeof(e))
        return EINVAL;
    if (index != 0)
        return ENODATA; /* an unused GID table entry */
    memset(&e, 0, sizeof(e));
    e.gid = to_sctx(ctx)->dev->gid;
    e.gid_index = 0;
    e.port_num = 1;
    e.gid_type = IBV_GID_TYPE_IB;
    memcpy(entry, &e, sizeof(e));
    return 0;
}

static ssize_t query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries, size_t max,
                               uint32_t flags, size_t size)
{
    if (flags || size < sizeof(*entries))
        return -EINVAL;
    if (!max)
        return -EINVAL;
    if (query_gid_ex(ctx, 1, 0, entries, 0, size))
        return -EINVAL;
    return 1;
}

static int query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
    if (port != 1 || index < 0 || index >= 128) {
        errno = EINVAL;
        return -1;
    }
    *pkey = index == 0 ? htobe16(0xffff) : 0;
    return 0;
}

static int query_rt_values(struct ibv_context *ctx, struct ibv_values_ex *values)
{
    uint64_t ns;

    if (values->comp_mask & ~(uint32_t)IBV_VALUES_MASK_RAW_CLOCK)
        return EINVAL;
    if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
        ns = sn_now_ns();
        values->raw_clock.tv_sec = (time_t)(ns / 1000000000ull);
        values->raw_clock.tv_nsec = (long)(ns % 1000000000ull);
    }
    return 0;
}

/* ---- asynchronous events ------------------------------------------------------------------------- */

/* One record the engine wrote into the context's pipe (struct sn_async_rec). */
static int get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
    struct sn_async_rec r;
    ssize_t n = read(ctx->async_fd, &r, sizeof(r));

    if (n != (ssize_t)sizeof(r))
        return -1;
    ev->event_type = (enum ibv_event_type)r.type;
    switch (r.type) {
    case IBV_EVENT_CQ_ERR:
        ev->element.cq = r.obj;
        break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        ev->element.srq = r.obj;
        break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_DEVICE_FATAL:
        ev->element.port_num = (int)(uintptr_t)r.obj;
        break;
    default:
        ev->element.qp = r.obj;
    }
    return 0;
}

static void ack_async_event(struct ibv_async_event *ev)
{
    pthread_mutex_t *mu = NULL;
    pthread_cond_t *cv = NULL;
    uint32_t *cnt = NULL;

    switch (ev->event_type) {
    case IBV_EVENT_CQ_ERR:
        mu = &ev->element.cq->mutex;
        cv = &ev->element.cq->cond;
        cnt = &ev->element.cq->async_events_completed;
        break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        mu = &ev->element.srq->mutex;
        cv = &ev->element.srq->cond;
        cnt = &ev->element.srq->events_completed;
        break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        mu = &ev->element.qp->mutex;
        cv = &ev->element.qp->cond;
        cnt = &ev->element.qp->events_completed;
        break;
    default:
        return;
    }
    pthread_mutex_lock(mu);
    ++*cnt;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
}

/* ---- contexts ------------------------------------------------------------------------------------- */

extern struct sn_provider_ops sn_ops;

static void *compat_nosys(void)
{
    errno = ENOSYS;
    return NULL;
}

static int compat_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    return sn_query_device(ctx, attr);
}

static int compat_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
    return sn_query_port(ctx, port, (struct ibv_port_attr *)attr, SN_COMPAT_PORT_ATTR_LEN);
}

struct ibv_context *sn_open_device(struct ibv_device *ibdev)
{
    struct sn_device *dev = to_sdev(ibdev);
    struct sn_context *ctx;
    struct ibv_context *c;
    struct verbs_context *v;

    if (!dev) {
        errno = ENODEV;
        return NULL;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        errno = ENOMEM;
        return NULL;
    }
    ctx->dev = dev;
    ctx->eng = sn_engine_get(dev);
    if (!ctx->eng) {
        free(ctx);
        return NULL;
    }
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->async_pipe[0] = ctx->async_pipe[1] = -1;
    if (pipe2(ctx->async_pipe, O_CLOEXEC))
        goto fail;
    fcntl(ctx->async_pipe[1], F_SETFL, O_NONBLOCK);
    ctx->cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    ctx->cq_uar = sn_uar_alloc(ctx, 0);
    if (!ctx->cq_uar)
        goto fail;

    v = &ctx->vctx;
    c = &v->context;
    c->device = ibdev;
    c->cmd_fd = ctx->cmd_fd;
    c->async_fd = ctx->async_pipe[0];
    c->num_comp_vectors = SN_NUM_COMP_VECTORS;
    pthread_mutex_init(&c->mutex, NULL);
    c->abi_compat = __VERBS_ABI_IS_EXTENDED;
    v->sz = sizeof(*v);
    /* the legacy slots of the ops table, as rdma-core fills them */
    c->ops._compat_query_device = compat_query_device;
    c->ops._compat_query_port = compat_query_port;
    c->ops._compat_alloc_pd = compat_nosys;
    c->ops._compat_dealloc_pd = compat_nosys;
    c->ops._compat_reg_mr = compat_nosys;
    c->ops._compat_rereg_mr = compat_nosys;
    c->ops._compat_dereg_mr = compat_nosys;
    c->ops._compat_create_cq = compat_nosys;
    c->ops._compat_cq_event = compat_nosys;
    c->ops._compat_resize_cq = compat_nosys;
    c->ops._compat_destroy_cq = compat_nosys;
    c->ops._compat_create_srq = compat_nosys;
    c->ops._compat_modify_srq = compat_nosys;
    c->ops._compat_query_srq = compat_nosys;
    c->ops._compat_destroy_srq = compat_nosys;
    c->ops._compat_create_qp = compat_nosys;
    c->ops._compat_query_qp = compat_nosys;
    c->ops._compat_modify_qp = compat_nosys;
    c->ops._compat_destroy_qp = compat_nosys;
    c->ops._compat_create_ah = compat_nosys;
    c->ops._compat_destroy_ah = compat_nosys;
    c->ops._compat_attach_mcast = compat_nosys;
    c->ops._compat_detach_mcast = compat_nosys;
    c->ops._compat_async_event = compat_nosys;
    /* the data path: what tracers replace */
    c->ops.alloc_mw = sn_alloc_mw;
    c->ops.bind_mw = sn_bind_mw;
    c->ops.dealloc_mw = sn_dealloc_mw;
    c->ops.poll_cq = sn_poll_cq;
    c->ops.req_notify_cq = sn_req_notify_cq;
    c->ops.post_srq_recv = sn_post_srq_recv;
    c->ops.post_send = sn_post_send;
    c->ops.post_recv = sn_post_recv;
    /* verbs_context operations (reached by the static inline verbs) */
    v->query_port = sn_query_port;
    v->query_device_ex = query_device_ex;
    v->create_cq_ex = sn_create_cq_ex;
    v->create_qp_ex = sn_create_qp_ex;
    v->query_rt_values = query_rt_values;
    v->get_srq_num = sn_get_srq_num;
    v->alloc_parent_domain = sn_alloc_parent_domain;
    return c;
fail:
    if (ctx->async_pipe[0] >= 0) {
        close(ctx->async_pipe[0]);
        close(ctx->async_pipe[1]);
    }
    sn_engine_put(dev);
    free(ctx);
    errno = ENOMEM;
    return NULL;
}

static int close_device(struct ibv_context *c)
{
    struct sn_context *ctx = to_sctx(c);

    while (ctx->umems) {
        struct sn_umem *u = ctx->umems;

        ctx->umems = u->next;
        free(u);
    }
    while (ctx->uars)
        sn_uar_free(ctx, ctx->uars);
    for (int i = 0; i < SN_UIDX_L1; i++)
        free(ctx->uidx[i]);
    close(ctx->async_pipe[0]);
    close(ctx->async_pipe[1]);
    if (ctx->cmd_fd >= 0)
        close(ctx->cmd_fd);
    sn_engine_put(ctx->dev);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return 0;
}

/* ---- registration -------------------------------------------------------------------------------- */

struct sn_provider_ops sn_ops = {
    .abi = SN_PROVIDER_ABI,
    .name = "simnic-mlx5",
    .get_device_list = sn_get_device_list,
    .device_guid = device_guid,
    .device_index = device_index,
    .read_sysfs = read_sysfs,
    .open_device = sn_open_device,
    .close_device = close_device,
    .get_async_event = get_async_event,
    .ack_async_event = ack_async_event,
    .query_device = sn_query_device,
    .query_port = sn_query_port,
    .query_gid = query_gid,
    .query_gid_ex = query_gid_ex,
    .query_gid_table = query_gid_table,
    .query_pkey = query_pkey,
    .alloc_pd = sn_alloc_pd,
    .dealloc_pd = sn_dealloc_pd,
    .reg_mr = sn_reg_mr,
    .rereg_mr = sn_rereg_mr,
    .dereg_mr = sn_dereg_mr,
    .create_comp_channel = sn_create_comp_channel,
    .destroy_comp_channel = sn_destroy_comp_channel,
    .create_cq = sn_create_cq,
    .resize_cq = sn_resize_cq,
    .destroy_cq = sn_destroy_cq,
    .get_cq_event = sn_get_cq_event,
    .ack_cq_events = sn_ack_cq_events,
    .create_srq = sn_create_srq,
    .modify_srq = sn_modify_srq,
    .query_srq = sn_query_srq,
    .destroy_srq = sn_destroy_srq,
    .create_qp = sn_create_qp,
    .query_qp = sn_query_qp,
    .modify_qp = sn_modify_qp,
    .destroy_qp = sn_destroy_qp,
    .qp_to_qp_ex = sn_qp_to_qp_ex,
    .query_qp_data_in_order = sn_query_qp_data_in_order,
    .set_ece = sn_set_ece,
    .query_ece = sn_query_ece,
    .create_ah = sn_create_ah,
    .destroy_ah = sn_destroy_ah,
    .attach_mcast = sn_attach_mcast,
    .detach_mcast = sn_detach_mcast,
};

/* Registers with the emulated libibverbs next to this library (loading it if the program
 * reached us first), through rdma-core's provider entry point. */
__attribute__((constructor)) static void register_provider(void)
{
    char self[PATH_MAX], path[PATH_MAX + 32];
    void (*reg)(const struct sn_provider_ops *);
    Dl_info info;
    void *h;

    sn_debug_enabled = getenv("SIMNIC_DEBUG") && atoi(getenv("SIMNIC_DEBUG")) > 0;
    if (!dladdr((void *)register_provider, &info) || !info.dli_fname)
        return;
    snprintf(self, sizeof(self), "%s", info.dli_fname);
    snprintf(path, sizeof(path), "%s/libibverbs.so.1", dirname(self));
    h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen(path, RTLD_NOW);
    if (!h) {
        sn_log("cannot load %s: %s", path, dlerror());
        return;
    }
    reg = (void (*)(const struct sn_provider_ops *))dlvsym(h, "verbs_register_driver_34",
                                                        "IBVERBS_PRIVATE_34");
    if (!reg) {
        sn_log("%s is not the emulated libibverbs", path);
        return;
    }
    reg(&sn_ops);
}
