/* Export helpers for the two emulated libraries.  Everything is compiled hidden; a version
 * script (libibverbs.map, libmlx5.map) names what is exported.  A symbol that rdma-core
 * exports under two versions (e.g. ibv_get_device_list@IBVERBS_1.0 and @@IBVERBS_1.1) is
 * defined twice under internal names and bound to its versions with .symver. */
#ifndef SN_EXPORT_H
#define SN_EXPORT_H

#define SN_EXPORT __attribute__((visibility("default")))
#define SN_SYMVER_DEFAULT(impl, name, ver) __asm__(".symver " #impl "," #name "@@" #ver)
#define SN_SYMVER_COMPAT(impl, name, ver) __asm__(".symver " #impl "," #name "@" #ver)

#endif
