/* A stand-in for rdma-core's libefa.so.1 (Amazon EFA direct verbs).  libfabric links libefa and
 * its efa provider asks every verbs device whether it is an EFA.  rdma-core's libefa answers
 * through libibverbs' private provider internals, which the emulated libibverbs does not have;
 * the emulated NIC has no EFA device, so this library answers as libefa does for a device that
 * is not an EFA: EOPNOTSUPP from every query, NULL (errno EOPNOTSUPP) from every constructor. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "sn_export.h"

struct ibv_context;

SN_EXPORT int efadv_query_device(struct ibv_context *ctx, void *attr, uint32_t inlen)
{
    (void)ctx; (void)attr; (void)inlen;
    return EOPNOTSUPP;
}

SN_EXPORT int efadv_query_ah(void *ah, void *attr, uint32_t inlen)
{
    (void)ah; (void)attr; (void)inlen;
    return EOPNOTSUPP;
}

static void *not_efa(void)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SN_EXPORT void *efadv_create_driver_qp(void *pd, void *attr, uint32_t driver_qp_type)
{
    (void)pd; (void)attr; (void)driver_qp_type;
    return not_efa();
}

SN_EXPORT void *efadv_create_qp_ex(void *ctx, void *attr, void *efa_attr, uint32_t inlen)
{
    (void)ctx; (void)attr; (void)efa_attr; (void)inlen;
    return not_efa();
}

SN_EXPORT void *efadv_create_cq(void *ctx, void *attr, void *efa_attr, uint32_t inlen)
{
    (void)ctx; (void)attr; (void)efa_attr; (void)inlen;
    return not_efa();
}

SN_EXPORT void *efadv_cq_from_ibv_cq_ex(void *cq)
{
    (void)cq;
    return not_efa();
}
