/* devx_state.h: what the tracer knows of the queues a program builds with mlx5dv devx.
 *
 * The mlx5 provider (hooks/mlx5.js) calls the st_devx_* functions below from its hooks on
 * mlx5dv_devx_alloc_uar / free_uar, umem_reg(_ex) / dereg and obj_create / modify / destroy; they
 * parse the structures and PRM command mailboxes, keep the tables and write the cold events.
 * The CUDA wrappers (cuda_register.c, cuda_subst.c) ask here whether a host address is a UAR we saw allocated.
 */
#ifndef SIGMATRACE_DEVX_STATE_H
#define SIGMATRACE_DEVX_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "db_env.h"
#include "repeater.h"

/* A UAR as the CUDA wrappers see it. */
struct devx_uar_view {
    uint64_t reg_addr;  /* the doorbell register */
    uint64_t page;      /* its 4 KiB page */
    uint32_t page_id;
    int index;          /* position in the UAR table */
    struct db_page *repeater; /* NULL until substituted */
    uint64_t fake_host, fake_dptr; /* our page (host address) and its device pointer */
    struct db_page *cpu_page; /* the page of ours the program holds in place of the UAR's
                                 (substituted at allocation, cpu_uar.c), or NULL */
};

/* Serialises the tables and substitution (cold path only). */
void devx_lock(void);
void devx_unlock(void);
/* The UAR whose page holds [addr, addr + len), or -1.  Call with the lock held. */
int devx_uar_find(uint64_t addr, uint64_t len, struct devx_uar_view *out);
/* The UAR at `index` is now substituted: route its QPs' doorbells through `pg`.  Lock held. */
void devx_uar_substituted(int index, struct db_page *pg, uint64_t fake_host, uint64_t fake_dptr);

/* Entry points of the mlx5 provider (hooks/mlx5.js).  `ts` is the TSC at the call's entry. */
DB_EXPORT void st_devx_uar_alloc(void *ctx, uint32_t flags, void *uar, uint64_t ts);
DB_EXPORT void st_devx_uar_free_enter(void *uar);
DB_EXPORT void st_devx_uar_free(void *uar, uint64_t ts);
DB_EXPORT void st_devx_umem_reg(void *ctx, void *addr, uint64_t size, uint32_t access, void *umem, uint64_t ts);
DB_EXPORT void st_devx_umem_reg_ex(void *ctx, const void *umem_in, void *umem, uint64_t ts);
DB_EXPORT void st_devx_umem_dereg(void *umem, int ret, uint64_t ts);
DB_EXPORT void st_devx_obj_create(void *ctx, const void *in, uint64_t inlen, const void *out, uint64_t outlen,
                                  void *obj, uint64_t ts);
DB_EXPORT void st_devx_obj_modify(void *obj, const void *in, uint64_t inlen, const void *out, uint64_t outlen,
                                  int ret, uint64_t ts);
DB_EXPORT void st_devx_obj_destroy(void *obj, int ret, uint64_t ts);
/* Attach mode: UARs mapped before tracing began cannot be substituted; say which. */
DB_EXPORT int st_devx_scan_preexisting(void);

#endif
