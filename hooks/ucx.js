/*
 * sigmatrace agent, ucx provider (UCX: libucp's operations, libuct_ib's endpoint functions).
 *
 * Every hooked function is a hot call: it goes to a compiled wrapper of the runtime
 * (native/runtime/ucx_hot.c) that writes CALL / CALL_END records around the original.
 *  - UCP: the exported ucp_*_nbx / _nbi functions of libucp.so.0.
 *  - UCT: uct_ep_put_short and friends are inline calls through the transport's ops table; the
 *    functions the tables point at are exported by libuct_ib.so.0 for rc_mlx5, dc_mlx5 and
 *    rc_verbs (ud_mlx5 and ud_verbs export none: their calls are not seen).  libuct_ib is loaded
 *    by UCX itself (dlopen) when it first looks for transports, after this provider installed.
 *
 * Spawn mode replaces each function's entry (Interceptor.replaceFast).  Attach mode patches no
 * code (another thread may be running it): it swaps the GOT slots of the modules that import
 * ucp_* functions (the program and its libraries; one aligned 8-byte store each), so UCP calls
 * made through those slots are seen, and UCT calls (reached through ops tables) are not.  The
 * `ucx_hooks` cold event lists what was hooked, how, and what is not seen.
 */
'use strict';

(() => {
  const OWNER = 'ucx';
  const api = sigmatrace;
  const UCP_LIB = 'libucp.so.0';
  const UCT_IB_LIB = 'libuct_ib.so.0';

  // the exported functions ucx_hot.c wraps (same lists)
  const UCP = [
    'ucp_put_nbx', 'ucp_get_nbx', 'ucp_put_nbi', 'ucp_get_nbi', 'ucp_atomic_op_nbx',
    'ucp_tag_send_nbx', 'ucp_tag_send_sync_nbx', 'ucp_tag_recv_nbx', 'ucp_am_send_nbx',
    'ucp_stream_send_nbx', 'ucp_stream_recv_nbx', 'ucp_ep_flush_nbx', 'ucp_worker_flush_nbx',
  ];
  const UCT_VERBS_OPS = [
    'put_short', 'put_bcopy', 'put_zcopy', 'get_bcopy', 'get_zcopy', 'am_short', 'am_short_iov',
    'am_bcopy', 'am_zcopy', 'atomic_cswap64', 'atomic64_post', 'atomic64_fetch', 'flush', 'fence',
  ];
  const UCT_MLX5_OPS = UCT_VERBS_OPS.concat([
    'atomic_cswap32', 'atomic32_post', 'atomic32_fetch',
    'tag_eager_short', 'tag_eager_bcopy', 'tag_eager_zcopy', 'tag_rndv_zcopy',
  ]);
  const UCT = [].concat(
    UCT_MLX5_OPS.map((op) => 'uct_rc_mlx5_ep_' + op),
    UCT_MLX5_OPS.map((op) => 'uct_dc_mlx5_ep_' + op),
    UCT_VERBS_OPS.map((op) => 'uct_rc_verbs_ep_' + op),
  );
  const NOT_SEEN_ATTACHED = [
    'uct: endpoint functions are reached through ops tables; attach mode patches no code',
    'ucp: calls from modules that do not import them through a GOT slot (libucp calling itself)',
  ];

  const replaced = [];        // addresses given to replaceFast (spawn mode)
  const done = new Set();     // libraries hooked (spawn) or modules whose GOT was scanned (attach)
  let total = 0;

  function findModule(soname) {
    for (const m of Process.enumerateModules()) {
      if (m.name === soname || m.name.startsWith(soname + '.')) return m;
    }
    return null;
  }

  // Spawn mode: replace the entry of each exported function of `names` in module `mod`.
  function replaceAll(mod, names, out) {
    const setOriginal = api.fn('st_set_original', 'int', ['pointer', 'pointer']);
    for (const name of names) {
      const addr = mod.findExportByName(name);
      if (addr === null) {
        out.failed.push({ name, why: 'not exported by ' + mod.name });
        continue;
      }
      try {
        const orig = Interceptor.replaceFast(addr, api.rt.getExportByName('st_' + name));
        if (setOriginal(Memory.allocUtf8String(name), orig) !== 0) throw new Error('the runtime has no wrapper for ' + name);
        replaced.push(addr);
        out.installed.push(name);
      } catch (e) {
        out.failed.push({ name, why: e.message || String(e) });
      }
    }
  }

  function protBits(p) {
    return (p[0] === 'r' ? 1 : 0) | (p[1] === 'w' ? 2 : 0) | (p[2] === 'x' ? 4 : 0);
  }

  // Attach mode: swap the GOT slots of every module (but libucp and ours) importing UCP names.
  function hookImports(ucp, out) {
    const setOriginal = api.fn('st_set_original', 'int', ['pointer', 'pointer']);
    const gotHook = api.fn('st_ucx_got_hook', 'int', ['pointer', 'pointer', 'int']);
    const skip = new Set([ucp.path, api.rt.path]);
    for (const m of Process.enumerateModules()) {
      if (done.has(m.path) || skip.has(m.path)) continue;
      done.add(m.path);
      let imports;
      try { imports = m.enumerateImports(); } catch (e) { continue; }
      for (const imp of imports) {
        if (imp.type !== 'function' || !UCP.includes(imp.name) || !imp.slot) continue;
        const name = imp.name;
        try {
          const real = ucp.findExportByName(name);
          if (real === null) throw new Error('not exported by ' + ucp.name);
          if (setOriginal(Memory.allocUtf8String(name), real) !== 0) throw new Error('the runtime has no wrapper for ' + name);
          const range = Process.findRangeByAddress(imp.slot);
          if (range === null) throw new Error('GOT slot not mapped');
          if (gotHook(imp.slot, api.rt.getExportByName('st_' + name), protBits(range.protection)) !== 0) {
            throw new Error('GOT slot ' + imp.slot + ' could not be swapped');
          }
          out.installed.push(name + '@' + m.name);
        } catch (e) {
          out.failed.push({ name: name + '@' + m.name, why: e.message || String(e) });
        }
      }
    }
  }

  // Hook what is loaded now and not hooked yet; report it (a `ucx_hooks` event per batch).
  function hookLoaded() {
    const out = { installed: [], failed: [] };
    const libs = [];
    const ucp = findModule(UCP_LIB);
    if (api.attached) {
      if (ucp !== null) hookImports(ucp, out);
    } else {
      for (const [soname, names] of [[UCP_LIB, UCP], [UCT_IB_LIB, UCT]]) {
        const m = soname === UCP_LIB ? ucp : findModule(soname);
        if (m === null || done.has(soname)) continue;
        done.add(soname);
        libs.push(m.path);
        replaceAll(m, names, out);
      }
    }
    if (out.installed.length === 0 && out.failed.length === 0) return out;
    total += out.installed.length;
    api.cold(api.now(), {
      ev: 'ucx_hooks', how: api.attached ? 'got' : 'replace', libraries: libs,
      installed: out.installed, failed: out.failed,
      wqe_links: api.fn('st_ucx_wqe_links', 'int', [])() === 1,
      not_seen: api.attached ? NOT_SEEN_ATTACHED : ['uct: ud_mlx5 and ud_verbs (no exported endpoint functions)'],
    });
    return out;
  }

  function install() {
    const out = hookLoaded();
    // libuct_ib (and libucp, for UCT-only programs that load it later) arrive through dlopen
    const dlopen = Process.getModuleByName('libc.so.6').findExportByName('dlopen');
    if (dlopen !== null) {
      api.attach(dlopen, {
        onLeave(ret) {
          if (ret.isNull()) return;
          try {
            const more = api.internal(hookLoaded);
            if (more.installed.length > 0) api.fn('st_provider', 'void', ['pointer', 'int', 'int'])(Memory.allocUtf8String(OWNER), 2, total);
          } catch (e) {
            api.error('ucx:dlopen', e);
          }
        },
      }, OWNER);
    }
    // waiting for libuct_ib is not a failure: say installed with what is there
    if (out.installed.length === 0) out.installed.push('dlopen-watch');
    return out;
  }

  function uninstall() {
    for (const addr of replaced) {
      try { Interceptor.revert(addr); } catch (e) { api.error('ucx:revert', e); }
    }
    replaced.length = 0;
    api.fn('st_ucx_got_restore', 'void', [])();
    done.clear();
    total = 0;
  }

  api.registerProvider({ name: OWNER, libraries: ['libucs.so.0'], install, uninstall });
})();
