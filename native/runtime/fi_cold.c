/* Cold hooks of the libfabric provider: following a fabric to its domains, their address vectors
 * and endpoints, and the cold events that let a reader name each endpoint's peers.
 *
 * The agent hooks the exported fi_fabric() and hands each fabric opened to st_fi_track_fabric.
 * Everything after that is reached through ops tables, so it is hooked the way endpoints are
 * (fi_track.h: a copy per object, our functions in its slots): the fabric's domain(), the
 * domain's endpoint(), srx_ctx(), scalable_ep() and av_open(), the av's insert calls, a
 * scalable endpoint's tx_ctx() and rx_ctx(), an endpoint's cm connect/accept and setopt, and
 * every object's fid close, bind and control (fi_enable, fi_ep_bind and fi_setopt may give an
 * endpoint other tables: they are copied again).
 *
 * Cold events (cold.jsonl; pointers as integers):
 *   fi_fabric    fabric, provider, name
 *   fi_domain    fabric, domain, provider, name, ep_type, addr_format, ret
 *   fi_endpoint  fn (fi_endpoint, fi_srx_context, fi_scalable_ep, fi_tx_context, fi_rx_context),
 *                domain, ep, provider, ep_type, addr_format, src and dest (when fi_info has
 *                them: {raw, format, peer}), traced, ret
 *   fi_av_open   domain, av, ret
 *   fi_av_insert av, fi_addr, raw (the address bytes, hex), format, peer (decoded: ip and port,
 *                gid, qpn, lid, service, as the format has them); one per address inserted
 *   fi_ep_bind   ep, av: the address vector an endpoint's fi_addr_t values index
 *   fi_connect / fi_accept  ep, raw, format, peer, ret: a connected endpoint's peer
 *   fi_close     obj, kind
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "fi_track.h"

#define FI_ENOSYS 38
#ifndef AF_IB
#define AF_IB 27
#endif

typedef int (*fabric_domain_t)(void *, struct fi_abi_info *, void **, void *);
typedef int (*fabric_domain2_t)(void *, struct fi_abi_info *, void **, uint64_t, void *);
typedef int (*domain_av_open_t)(void *, void *, void **, void *);
typedef int (*domain_ep_t)(void *, struct fi_abi_info *, void **, void *);
typedef int (*domain_ep2_t)(void *, struct fi_abi_info *, void **, uint64_t, void *);
typedef int (*domain_srx_t)(void *, void *, void **, void *);
typedef int (*av_insert_t)(void *, const void *, size_t, fi_addr_t *, uint64_t, void *);
typedef int (*av_insertsvc_t)(void *, const char *, const char *, fi_addr_t *, uint64_t, void *);
typedef int (*av_insertsym_t)(void *, const char *, size_t, const char *, size_t, fi_addr_t *, uint64_t, void *);
typedef int (*av_lookup_t)(void *, fi_addr_t, void *, size_t *);
typedef int (*fid_close_t)(void *);
typedef int (*fid_bind_t)(void *, void *, uint64_t);
typedef int (*fid_control_t)(void *, int, void *);
typedef int (*ep_setopt_t)(void *, int, int, const void *, size_t);
typedef int (*ep_ctx_t)(void *, int, void *, void **, void *);
typedef int (*cm_connect_t)(void *, const void *, const void *, size_t);
typedef int (*cm_accept_t)(void *, const void *, size_t);
typedef int (*cm_getpeer_t)(void *, void *, size_t *);

static const char *const fi_kind_names[] = {"", "fabric", "domain", "av", "endpoint"};

/* The original table `t` of the object a hook was called for, or NULL. */
static void *const *fi_cold_orig(void *obj, int t, struct fi_obj **out)
{
    struct fi_obj *o = fi_obj_of(obj, *(void **)((char *)obj + 16 + 8 * t));
    if (out)
        *out = o;
    return o ? (void *const *)__atomic_load_n(&o->orig[t], __ATOMIC_ACQUIRE) : NULL;
}

/* The original function of a cold hook, and `ts`, the call's entry (its events' time). */
#define COLD_ORIG(obj, t, type, slot, o)              \
    uint64_t ts = st_now();                            \
    void *const *tbl_ = fi_cold_orig((obj), (t), (o)); \
    if (!tbl_)                                         \
        return -FI_ENOSYS;                             \
    type fn_ = (type)tbl_[slot]

/* ------------------------------------------------------------------ addresses */

static size_t fi_hex(char *out, size_t n, const void *p, size_t len)
{
    static const char d[] = "0123456789abcdef";
    const uint8_t *b = p;
    size_t w = 0;
    for (size_t i = 0; i < len && w + 3 < n; i++) {
        out[w++] = d[b[i] >> 4];
        out[w++] = d[b[i] & 15];
    }
    out[w] = 0;
    return w;
}

static void fi_gid(char *out, size_t n, const uint8_t *gid)
{
    char ip[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, gid, ip, sizeof(ip)))
        ip[0] = 0;
    snprintf(out, n, "%s", ip);
}

/* How long an address of `format` is (0: unknown), from its first bytes where they say. */
static size_t fi_addr_len(uint32_t format, const void *addr)
{
    switch (format) {
    case FI_ABI_SOCKADDR_IN: return sizeof(struct sockaddr_in);
    case FI_ABI_SOCKADDR_IN6: return sizeof(struct sockaddr_in6);
    case FI_ABI_SOCKADDR_IB: return 48; /* struct sockaddr_ib */
    case FI_ABI_ADDR_IB_UD: return sizeof(struct fi_abi_ib_ud_name);
    case FI_ABI_ADDR_STR: return addr ? strnlen(addr, 256) : 0;
    case FI_ABI_SOCKADDR: {
        sa_family_t fam = addr ? ((const struct sockaddr *)addr)->sa_family : 0;
        return fam == AF_INET ? sizeof(struct sockaddr_in) : fam == AF_INET6 ? sizeof(struct sockaddr_in6) : fam == AF_IB ? 48 : 0;
    }
    default: return 0;
    }
}

/* `"raw":"<hex>","format":N,"peer":{...}` for one address: what it names, as far as the
 * format tells (a socket address: ip and port; AF_IB: gid and service id; the verbs provider's
 * datagram name: gid, qpn, lid and service). */
static void fi_fmt_addr(char *out, size_t n, uint32_t format, const void *addr, size_t len)
{
    char hex[2 * 256 + 1], peer[256] = "{}";
    if (!addr || !len) {
        snprintf(out, n, "\"raw\":null,\"format\":%u,\"peer\":null", format);
        return;
    }
    fi_hex(hex, sizeof(hex), addr, len > 256 ? 256 : len);
    if (format == FI_ABI_ADDR_IB_UD && len >= sizeof(struct fi_abi_ib_ud_name)) {
        struct fi_abi_ib_ud_name u;
        char gid[64];
        memcpy(&u, addr, sizeof(u));
        fi_gid(gid, sizeof(gid), u.gid);
        snprintf(peer, sizeof(peer), "{\"gid\":\"%s\",\"qpn\":%u,\"lid\":%u,\"service\":%u}", gid, u.qpn, u.lid, u.service);
    } else if (format == FI_ABI_SOCKADDR || format == FI_ABI_SOCKADDR_IN || format == FI_ABI_SOCKADDR_IN6 ||
               format == FI_ABI_SOCKADDR_IB) {
        sa_family_t fam = ((const struct sockaddr *)addr)->sa_family;
        char ip[INET6_ADDRSTRLEN];
        if (fam == AF_INET && len >= sizeof(struct sockaddr_in)) {
            struct sockaddr_in s;
            memcpy(&s, addr, sizeof(s));
            inet_ntop(AF_INET, &s.sin_addr, ip, sizeof(ip));
            snprintf(peer, sizeof(peer), "{\"ip\":\"%s\",\"port\":%u}", ip, ntohs(s.sin_port));
        } else if (fam == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
            struct sockaddr_in6 s;
            memcpy(&s, addr, sizeof(s));
            inet_ntop(AF_INET6, &s.sin6_addr, ip, sizeof(ip));
            snprintf(peer, sizeof(peer), "{\"ip\":\"%s\",\"port\":%u}", ip, ntohs(s.sin6_port));
        } else if (fam == AF_IB && len >= 48) {
            const uint8_t *b = addr;
            uint64_t sid;
            memcpy(&sid, b + 24, 8);
            fi_gid(ip, sizeof(ip), b + 8);
            snprintf(peer, sizeof(peer), "{\"gid\":\"%s\",\"sid\":%llu}", ip, (unsigned long long)__builtin_bswap64(sid));
        }
    } else if (format == FI_ABI_ADDR_STR) {
        char s[260];
        snprintf(s, sizeof(s), "%.*s", (int)(len > 255 ? 255 : len), (const char *)addr);
        char q[540];
        st_json_str(q, sizeof(q), s);
        snprintf(peer, sizeof(peer), "{\"name\":%s}", q);
    }
    snprintf(out, n, "\"raw\":\"%s\",\"format\":%u,\"peer\":%s", hex, format, peer);
}

/* A JSON string; "" for none (the reader types "provider" as a string). */
static void fi_quote(char *out, size_t n, const char *s)
{
    st_json_str(out, n, s ? s : "");
}

/* provider and name of the object an fi_info describes */
static void fi_info_names(struct fi_obj *o, const struct fi_abi_info *info, char *name, size_t n)
{
    snprintf(name, n, "\"\"");
    if (!info)
        return;
    o->addr_format = info->addr_format;
    if (info->ep_attr)
        o->ep_type = info->ep_attr->type;
    if (info->fabric_attr && info->fabric_attr->prov_name)
        snprintf(o->prov, sizeof(o->prov), "%s", info->fabric_attr->prov_name);
    if (info->domain_attr && info->domain_attr->name)
        fi_quote(name, n, info->domain_attr->name);
}

/* ------------------------------------------------------------------ fabric */

/* `ts`: when the program's fi_fabric call began. */
ST_EXPORT int st_fi_track_fabric(void *fabric, const struct fi_abi_fabric_attr *attr, uint64_t ts)
{
    struct fi_obj *o = fi_track(fabric, FI_KIND_FABRIC, NULL);
    if (!o)
        return -1;
    char prov[128], name[256];
    fi_quote(prov, sizeof(prov), attr ? attr->prov_name : NULL);
    fi_quote(name, sizeof(name), attr ? attr->name : NULL);
    if (attr && attr->prov_name)
        snprintf(o->prov, sizeof(o->prov), "%s", attr->prov_name);
    st_coldf(ts, "\"ev\":\"fi_fabric\",\"fabric\":%lu,\"provider\":%s,\"name\":%s", (unsigned long)fabric, prov, name);
    return o->ours[FI_TBL_OPS] ? 1 : 0;
}

static void fi_domain_opened(uint64_t ts, void *fabric, struct fi_abi_info *info, void *dom, int ret)
{
    struct fi_obj *fo = fi_find(fabric);
    struct fi_obj *o = ret == 0 ? fi_track(dom, FI_KIND_DOMAIN, fo) : NULL;
    char name[256] = "\"\"", prov[64];
    if (o)
        fi_info_names(o, info, name, sizeof(name));
    fi_quote(prov, sizeof(prov), o ? o->prov : fo ? fo->prov : NULL);
    st_coldf(ts, "\"ev\":\"fi_domain\",\"fabric\":%lu,\"domain\":%lu,\"provider\":%s,\"name\":%s,\"ep_type\":%d,"
             "\"addr_format\":%u,\"ret\":%d", (unsigned long)fabric, ret == 0 ? (unsigned long)dom : 0ul, prov, name,
             o ? o->ep_type : 0, o ? o->addr_format : 0, ret);
}

static int h_fabric_domain(void *fabric, struct fi_abi_info *info, void **dom, void *ctx)
{
    COLD_ORIG(fabric, FI_TBL_OPS, fabric_domain_t, FI_SLOT_FABRIC_DOMAIN, NULL);
    int r = fn_(fabric, info, dom, ctx);
    if (st_recording())
        fi_domain_opened(ts, fabric, info, r == 0 ? *dom : NULL, r);
    return r;
}

static int h_fabric_domain2(void *fabric, struct fi_abi_info *info, void **dom, uint64_t flags, void *ctx)
{
    COLD_ORIG(fabric, FI_TBL_OPS, fabric_domain2_t, FI_SLOT_FABRIC_DOMAIN2, NULL);
    int r = fn_(fabric, info, dom, flags, ctx);
    if (st_recording())
        fi_domain_opened(ts, fabric, info, r == 0 ? *dom : NULL, r);
    return r;
}

/* ------------------------------------------------------------------ domain */

static void fi_ep_opened(uint64_t ts, const char *fn, void *dom, struct fi_abi_info *info, void *ep, int ret)
{
    struct fi_obj *d = fi_find(dom);
    struct fi_obj *o = ret == 0 ? fi_track(ep, FI_KIND_EP, d) : NULL;
    char name[256], prov[64], src[700] = "\"src\":null", dest[700] = "\"dest\":null";
    if (o && info) {
        fi_info_names(o, info, name, sizeof(name));
        char a[660];
        if (info->src_addr) {
            fi_fmt_addr(a, sizeof(a), info->addr_format, info->src_addr, info->src_addrlen);
            snprintf(src, sizeof(src), "\"src\":{%s}", a);
        }
        if (info->dest_addr) {
            fi_fmt_addr(a, sizeof(a), info->addr_format, info->dest_addr, info->dest_addrlen);
            snprintf(dest, sizeof(dest), "\"dest\":{%s}", a);
        }
    }
    fi_quote(prov, sizeof(prov), o ? o->prov : d ? d->prov : NULL);
    st_coldf(ts, "\"ev\":\"fi_endpoint\",\"fn\":\"%s\",\"domain\":%lu,\"ep\":%lu,\"provider\":%s,\"ep_type\":%d,"
             "\"addr_format\":%u,%s,%s,\"traced\":%s,\"ret\":%d", fn, (unsigned long)dom,
             ret == 0 ? (unsigned long)ep : 0ul, prov, o ? o->ep_type : 0, o ? o->addr_format : 0, src, dest,
             o && o->ours[FI_TBL_MSG] ? "true" : "false", ret);
}

static int h_domain_endpoint(void *dom, struct fi_abi_info *info, void **ep, void *ctx)
{
    COLD_ORIG(dom, FI_TBL_OPS, domain_ep_t, FI_SLOT_DOMAIN_ENDPOINT, NULL);
    int r = fn_(dom, info, ep, ctx);
    if (st_recording())
        fi_ep_opened(ts, "fi_endpoint", dom, info, r == 0 ? *ep : NULL, r);
    return r;
}

static int h_domain_endpoint2(void *dom, struct fi_abi_info *info, void **ep, uint64_t flags, void *ctx)
{
    COLD_ORIG(dom, FI_TBL_OPS, domain_ep2_t, FI_SLOT_DOMAIN_ENDPOINT2, NULL);
    int r = fn_(dom, info, ep, flags, ctx);
    if (st_recording())
        fi_ep_opened(ts, "fi_endpoint2", dom, info, r == 0 ? *ep : NULL, r);
    return r;
}

static int h_domain_scalable_ep(void *dom, struct fi_abi_info *info, void **ep, void *ctx)
{
    COLD_ORIG(dom, FI_TBL_OPS, domain_ep_t, FI_SLOT_DOMAIN_SCALABLE_EP, NULL);
    int r = fn_(dom, info, ep, ctx);
    if (st_recording())
        fi_ep_opened(ts, "fi_scalable_ep", dom, info, r == 0 ? *ep : NULL, r);
    return r;
}

static int h_domain_srx_ctx(void *dom, void *attr, void **ep, void *ctx)
{
    COLD_ORIG(dom, FI_TBL_OPS, domain_srx_t, FI_SLOT_DOMAIN_SRX_CTX, NULL);
    int r = fn_(dom, attr, ep, ctx);
    if (st_recording())
        fi_ep_opened(ts, "fi_srx_context", dom, NULL, r == 0 ? *ep : NULL, r);
    return r;
}

static int h_domain_av_open(void *dom, void *attr, void **av, void *ctx)
{
    COLD_ORIG(dom, FI_TBL_OPS, domain_av_open_t, FI_SLOT_DOMAIN_AV_OPEN, NULL);
    int r = fn_(dom, attr, av, ctx);
    if (st_recording()) {
        if (r == 0)
            fi_track(*av, FI_KIND_AV, fi_find(dom));
        st_coldf(ts, "\"ev\":\"fi_av_open\",\"domain\":%lu,\"av\":%lu,\"ret\":%d", (unsigned long)dom,
                 r == 0 ? (unsigned long)*av : 0ul, r);
    }
    return r;
}

/* ------------------------------------------------------------------ address vectors */

/* One fi_av_insert event per address inserted: the bytes the program gave where the format says
 * how long they are, else what the av's lookup returns. */
static void fi_av_inserted(uint64_t ts, void *av, const void *addrs, size_t count, const fi_addr_t *fi_addr)
{
    struct fi_obj *o = NULL;
    void *const *tbl = fi_cold_orig(av, FI_TBL_OPS, &o);
    if (!o || !fi_addr)
        return;
    uint32_t format = o->addr_format;
    size_t size = tbl ? *(const size_t *)tbl : 0;
    av_lookup_t lookup = tbl && size > 8 * FI_SLOT_AV_LOOKUP ? (av_lookup_t)tbl[FI_SLOT_AV_LOOKUP] : NULL;
    const char *p = addrs;
    for (size_t i = 0; i < count && i < 4096; i++) {
        if (fi_addr[i] == FI_ADDR_NONE)
            continue;
        uint8_t buf[256];
        const void *a = NULL;
        size_t len = p ? fi_addr_len(format, p) : 0;
        if (len) {
            a = p;
        } else if (lookup) {
            size_t n = sizeof(buf);
            if (lookup(av, fi_addr[i], buf, &n) == 0) {
                a = buf;
                len = n < sizeof(buf) ? n : sizeof(buf);
            }
        }
        char text[700];
        fi_fmt_addr(text, sizeof(text), format, a, len);
        st_coldf(ts, "\"ev\":\"fi_av_insert\",\"av\":%lu,\"fi_addr\":%llu,%s", (unsigned long)av,
                 (unsigned long long)fi_addr[i], text);
        if (p && len)
            p += len;
        else
            p = NULL; /* the next address's start is unknown */
    }
}

static int h_av_insert(void *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags, void *ctx)
{
    COLD_ORIG(av, FI_TBL_OPS, av_insert_t, FI_SLOT_AV_INSERT, NULL);
    int r = fn_(av, addr, count, fi_addr, flags, ctx);
    if (r > 0 && st_recording())
        fi_av_inserted(ts, av, addr, count, fi_addr);
    return r;
}

static int h_av_insertsvc(void *av, const char *node, const char *service, fi_addr_t *fi_addr, uint64_t flags, void *ctx)
{
    COLD_ORIG(av, FI_TBL_OPS, av_insertsvc_t, FI_SLOT_AV_INSERTSVC, NULL);
    int r = fn_(av, node, service, fi_addr, flags, ctx);
    if (r > 0 && st_recording())
        fi_av_inserted(ts, av, NULL, 1, fi_addr);
    return r;
}

static int h_av_insertsym(void *av, const char *node, size_t nodecnt, const char *service, size_t svccnt,
                          fi_addr_t *fi_addr, uint64_t flags, void *ctx)
{
    COLD_ORIG(av, FI_TBL_OPS, av_insertsym_t, FI_SLOT_AV_INSERTSYM, NULL);
    int r = fn_(av, node, nodecnt, service, svccnt, fi_addr, flags, ctx);
    if (r > 0 && st_recording())
        fi_av_inserted(ts, av, NULL, nodecnt * svccnt, fi_addr);
    return r;
}

/* ------------------------------------------------------------------ every object's fid ops */

static int h_fid_close(void *fid)
{
    struct fi_obj *o = NULL;
    COLD_ORIG(fid, FI_TBL_FID, fid_close_t, FI_SLOT_FID_CLOSE, &o);
    int kind = o ? (int)o->kind : 0;
    if (o)
        fi_release(o); /* its own tables back first: the provider may free them */
    int r = fn_(fid);
    if (o && r != 0)
        fi_sync(o);
    if (r == 0 && o) {
        fi_forget(o);
        if (st_recording())
            st_coldf(ts, "\"ev\":\"fi_close\",\"obj\":%lu,\"kind\":\"%s\"", (unsigned long)fid, fi_kind_names[kind]);
    }
    return r;
}

static int h_fid_bind(void *fid, void *bfid, uint64_t flags)
{
    struct fi_obj *o = NULL;
    COLD_ORIG(fid, FI_TBL_FID, fid_bind_t, FI_SLOT_FID_BIND, &o);
    int r = fn_(fid, bfid, flags);
    if (o && st_recording()) {
        struct fi_obj *b = fi_find(bfid);
        if (r == 0 && o->kind == FI_KIND_EP && b && b->kind == FI_KIND_AV)
            st_coldf(ts, "\"ev\":\"fi_ep_bind\",\"ep\":%lu,\"av\":%lu", (unsigned long)fid, (unsigned long)bfid);
        fi_sync(o); /* a provider may choose its data-path tables when bound */
    }
    return r;
}

static int h_fid_control(void *fid, int command, void *arg)
{
    struct fi_obj *o = NULL;
    COLD_ORIG(fid, FI_TBL_FID, fid_control_t, FI_SLOT_FID_CONTROL, &o);
    (void)ts;
    int r = fn_(fid, command, arg);
    if (o && st_recording())
        fi_sync(o); /* fi_enable is a control command: the tables may have changed */
    return r;
}

static int h_ep_setopt(void *fid, int level, int name, const void *val, size_t len)
{
    struct fi_obj *o = NULL;
    COLD_ORIG(fid, FI_TBL_OPS, ep_setopt_t, FI_SLOT_EP_SETOPT, &o);
    (void)ts;
    int r = fn_(fid, level, name, val, len);
    if (o && st_recording())
        fi_sync(o);
    return r;
}

/* A scalable endpoint's transmit and receive contexts are endpoints of their own. */
static int fi_ep_ctx(const char *fn, int slot, void *sep, int index, void *attr, void **ctx_ep, void *context)
{
    struct fi_obj *o = NULL;
    COLD_ORIG(sep, FI_TBL_OPS, ep_ctx_t, slot, &o);
    int r = fn_(sep, index, attr, ctx_ep, context);
    if (st_recording())
        fi_ep_opened(ts, fn, o && o->parent ? o->parent->obj : NULL, NULL, r == 0 ? *ctx_ep : NULL, r);
    return r;
}

static int h_ep_tx_ctx(void *sep, int index, void *attr, void **tx, void *ctx)
{
    return fi_ep_ctx("fi_tx_context", FI_SLOT_EP_TX_CTX, sep, index, attr, tx, ctx);
}

static int h_ep_rx_ctx(void *sep, int index, void *attr, void **rx, void *ctx)
{
    return fi_ep_ctx("fi_rx_context", FI_SLOT_EP_RX_CTX, sep, index, attr, rx, ctx);
}

/* ------------------------------------------------------------------ connection management */

static void fi_peer_event(uint64_t ts, const char *ev, void *ep, struct fi_obj *o, const void *addr, int ret)
{
    char text[700];
    uint32_t format = o ? o->addr_format : 0;
    fi_fmt_addr(text, sizeof(text), format, addr, addr ? fi_addr_len(format, addr) : 0);
    st_coldf(ts, "\"ev\":\"%s\",\"ep\":%lu,%s,\"ret\":%d", ev, (unsigned long)ep, text, ret);
}

static int h_cm_connect(void *ep, const void *addr, const void *param, size_t paramlen)
{
    struct fi_obj *o = NULL;
    COLD_ORIG(ep, FI_TBL_CM, cm_connect_t, FI_SLOT_CM_CONNECT, &o);
    int r = fn_(ep, addr, param, paramlen);
    if (st_recording())
        fi_peer_event(ts, "fi_connect", ep, o, addr, r);
    return r;
}

static int h_cm_accept(void *ep, const void *param, size_t paramlen)
{
    struct fi_obj *o = NULL;
    COLD_ORIG(ep, FI_TBL_CM, cm_accept_t, FI_SLOT_CM_ACCEPT, &o);
    int r = fn_(ep, param, paramlen);
    if (st_recording()) {
        /* the peer, as the provider knows it from the connection request */
        uint8_t peer[256];
        size_t n = sizeof(peer);
        cm_getpeer_t getpeer = *(size_t *)tbl_ > 8 * FI_SLOT_CM_GETPEER ? (cm_getpeer_t)tbl_[FI_SLOT_CM_GETPEER] : NULL;
        int have = getpeer && getpeer(ep, peer, &n) == 0;
        fi_peer_event(ts, "fi_accept", ep, o, have ? peer : NULL, r);
    }
    return r;
}

/* ------------------------------------------------------------------ slot tables */

void *fi_cold_hook(int kind, int tbl, int slot)
{
    if (tbl == FI_TBL_FID) {
        if (slot == FI_SLOT_FID_CLOSE)
            return h_fid_close;
        if (kind == FI_KIND_EP && slot == FI_SLOT_FID_BIND)
            return h_fid_bind;
        if (kind == FI_KIND_EP && slot == FI_SLOT_FID_CONTROL)
            return h_fid_control;
        return NULL;
    }
    if (tbl == FI_TBL_OPS && kind == FI_KIND_EP)
        return slot == FI_SLOT_EP_SETOPT ? (void *)h_ep_setopt
             : slot == FI_SLOT_EP_TX_CTX ? (void *)h_ep_tx_ctx
             : slot == FI_SLOT_EP_RX_CTX ? (void *)h_ep_rx_ctx : NULL;
    if (tbl == FI_TBL_CM && kind == FI_KIND_EP)
        return slot == FI_SLOT_CM_CONNECT ? (void *)h_cm_connect : slot == FI_SLOT_CM_ACCEPT ? (void *)h_cm_accept : NULL;
    if (tbl != FI_TBL_OPS)
        return NULL;
    switch (kind) {
    case FI_KIND_FABRIC:
        return slot == FI_SLOT_FABRIC_DOMAIN ? (void *)h_fabric_domain
             : slot == FI_SLOT_FABRIC_DOMAIN2 ? (void *)h_fabric_domain2 : NULL;
    case FI_KIND_DOMAIN:
        switch (slot) {
        case FI_SLOT_DOMAIN_AV_OPEN: return h_domain_av_open;
        case FI_SLOT_DOMAIN_ENDPOINT: return h_domain_endpoint;
        case FI_SLOT_DOMAIN_SCALABLE_EP: return h_domain_scalable_ep;
        case FI_SLOT_DOMAIN_SRX_CTX: return h_domain_srx_ctx;
        case FI_SLOT_DOMAIN_ENDPOINT2: return h_domain_endpoint2;
        default: return NULL;
        }
    case FI_KIND_AV:
        return slot == FI_SLOT_AV_INSERT ? (void *)h_av_insert
             : slot == FI_SLOT_AV_INSERTSVC ? (void *)h_av_insertsvc
             : slot == FI_SLOT_AV_INSERTSYM ? (void *)h_av_insertsym : NULL;
    default: return NULL;
    }
}
