/*
 * sigmatrace agent, cuda provider (the CUDA driver, libcuda.so.1).
 *
 * The doorbell hijack: cuMemHostGetDevicePointer(_v2) of a UAR page returns the device pointer
 * of a pinned page of ours that a repeater watches; cuMemHostRegister(_v2) / Unregister are
 * recorded; cuGetProcAddress(_v2) hands out wrappers, so programs that reach the driver through
 * the CUDA runtime are covered too.  These change results, so they are compiled functions of the
 * runtime (native/runtime/cuda_*.c) installed with Interceptor.replaceFast; each original
 * goes back to the runtime with st_set_original.
 */
'use strict';

(() => {
  const OWNER = 'cuda';
  const LIB = 'libcuda.so.1';
  const api = sigmatrace;
  const WRAPPED = [
    'cuMemHostGetDevicePointer_v2', 'cuMemHostGetDevicePointer',
    'cuMemHostRegister_v2', 'cuMemHostRegister', 'cuMemHostUnregister',
    'cuGetProcAddress_v2', 'cuGetProcAddress',
  ];
  const replaced = [];

  function install(mods) {
    const lib = mods[LIB];
    const installed = [];
    const failed = [];
    if (api.fn('st_cuda_init', 'int', [])() !== 0) {
      api.cold(api.now(), { ev: 'error', where: 'cuda', msg: 'the CUDA driver lacks what WQE recovery needs; doorbells are forwarded only' });
    }
    const setOriginal = api.fn('st_set_original', 'int', ['pointer', 'pointer']);
    const hooked = api.fn('st_cuda_hooked', 'void', ['pointer', 'pointer']);
    const seen = new Map(); // address -> export name replaced there
    for (const name of WRAPPED) {
      const addr = lib.findExportByName(name);
      if (addr === null) continue; // older drivers lack the _v2 / cuGetProcAddress entries
      if (seen.has(addr.toString())) { // two names of one function: hooked once
        installed.push(name + '=' + seen.get(addr.toString()));
        continue;
      }
      seen.set(addr.toString(), name);
      try {
        const cname = Memory.allocUtf8String(name);
        hooked(cname, addr);
        const orig = Interceptor.replaceFast(addr, api.rt.getExportByName('st_' + name));
        if (setOriginal(cname, orig) !== 0) throw new Error('the runtime has no wrapper for ' + name);
        replaced.push(addr);
        installed.push(name);
      } catch (e) {
        failed.push({ name, why: e.message || String(e) });
      }
    }
    return { installed, failed };
  }

  function uninstall() {
    // pointers our cuGetProcAddress wrappers handed out stay valid: they call the driver directly
    for (const addr of replaced) {
      try { Interceptor.revert(addr); } catch (e) { api.error('cuda:revert', e); }
    }
    replaced.length = 0;
  }

  api.registerProvider({ name: OWNER, libraries: [LIB], install, uninstall });
})();
