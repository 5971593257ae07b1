/* cpu_uar.h: doorbell pages of CPU producers (cpu_uar.c; docs/cpu-wqes.md).  Cold path only. */
#ifndef SIGMATRACE_CPU_UAR_H
#define SIGMATRACE_CPU_UAR_H

#include <stdint.h>

#include "cpu_sq_table.h"
#include "repeater.h"

/* Whether UAR pointers handed to the program now are substituted: recording, doorbells on. */
int cpu_uar_enabled(void);
/* Stand a page of ours in for the UAR page holding register `reg` (one per UAR page, made on
 * first need) and watch the register's halves (`half`: bytes per BlueFlame half; 0: one 8-byte
 * doorbell word).  The page's repeater, and the register's address in our page in *fake_reg;
 * NULL when not substituted (the program keeps the real register). */
struct db_page *cpu_uar_substitute(uint64_t reg, uint32_t half, uint64_t *fake_reg);
/* Our page standing in for the UAR page of register REG (the real or our address), or NULL. */
struct db_page *cpu_uar_page_of(uint64_t reg);
/* The address in our page that stands for `addr` in a substituted UAR page, or 0. */
uint64_t cpu_uar_fake_of(uint64_t addr);
/* A queue of mlx5dv_init_obj rings through `pg`: its WQEs from producer index `pi_now` on are
 * the repeater's to record. */
void cpu_uar_add_qp(struct db_page *pg, const struct cpu_sq_info *sq, uint16_t pi_now);
/* A queue in GPU memory rings through `pg`, or the program hands `pg` to a GPU: its copies of
 * GPU memory run in the CUDA context current on this thread (kept if it has one already). */
void cpu_uar_gpu_context(struct db_page *pg);
/* The queue is destroyed. */
void cpu_uar_qp_gone(uint32_t qpn);

#endif
