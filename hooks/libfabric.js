/*
 * sigmatrace agent, libfabric provider (libfabric.so.1).
 *
 * libfabric exports only the calls that open things (fi_getinfo, fi_fabric, fi_open, ...):
 * fi_domain, fi_endpoint, fi_send, fi_writemsg and the rest are inline calls through per-object
 * ops tables.  So the agent hooks one export, fi_fabric, and hands every fabric opened to the
 * runtime (st_fi_track_fabric, native/runtime/fi_cold.c), which follows it through its own
 * copies of the ops tables: fabric -> domains -> endpoints and address vectors.  Every endpoint
 * gets its own copy of its msg, rma, tagged and atomic tables with the runtime's compiled hooks
 * in the slots (fi_hot.c): no JavaScript on the data path, one aligned 8-byte store per table.
 *
 * fi_fabric is hooked without the cold-hook nesting guard: a layered provider (verbs;ofi_rxm)
 * opens its core fabric with fi_fabric from inside the program's own fi_fabric call, and both
 * must be followed.
 *
 * Attach mode: objects opened before tracing began are not found (libfabric keeps no list a
 * program can read), so their calls are not traced; an `fi_preexisting` cold event says so.
 */
'use strict';

(() => {
  const OWNER = 'libfabric';
  const LIB = 'libfabric.so.1';
  const api = sigmatrace;

  function install(mods) {
    const lib = mods[LIB];
    const addr = lib.findExportByName('fi_fabric');
    if (addr === null) return { installed: [], failed: [{ name: 'fi_fabric', why: 'not exported' }] };
    const track = api.fn('st_fi_track_fabric', 'int', ['pointer', 'pointer', 'uint64']);
    try {
      api.attach(addr, {
        onEnter(args) { this.ts = api.now(); this.attr = args[0]; this.out = args[1]; },
        onLeave(ret) {
          if (ret.toInt32() !== 0 || this.out.isNull()) return;
          try {
            track(this.out.readPointer(), this.attr, this.ts);
          } catch (e) {
            api.error('libfabric:fi_fabric', e);
          }
        },
      }, OWNER);
    } catch (e) {
      return { installed: [], failed: [{ name: 'fi_fabric', why: e.message || String(e) }] };
    }
    return {
      installed: ['fi_fabric', 'ops:fabric', 'ops:domain', 'ops:av', 'ops:cm', 'ops:msg', 'ops:rma', 'ops:tagged', 'ops:atomic'],
      failed: [],
    };
  }

  function afterInstall() {
    if (!api.attached) return;
    api.cold(api.now(), {
      ev: 'fi_preexisting', found: false,
      why: 'fabrics, domains and endpoints opened before attach are not found: their calls are not traced',
    });
  }

  api.registerProvider({ name: OWNER, libraries: [LIB], install, afterInstall });
})();
