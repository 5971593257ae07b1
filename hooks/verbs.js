/*
 * sigmatrace agent, verbs provider (libibverbs).
 *
 * Cold calls (open_device, alloc_pd, reg_mr, create_cq, create_qp, modify_qp, destroys, ...)
 * are hooked with Interceptor.attach; their events are formatted by the runtime (st_vfmt_*),
 * which reads verbs.h structures, so no structure offset is written here.
 *
 * Hot calls (post_send, post_recv, poll_cq, post_srq_recv) are inline functions in verbs.h
 * that call through context->ops: the runtime replaces those slots of every context with its
 * own compiled hooks (st_verbs_hook_context), one aligned 8-byte store per slot.
 *
 * In attach mode the contexts opened before tracing began are found by learning the
 * provider's ops functions from a throwaway context and scanning writable memory for contexts
 * whose slots hold them; their QPs are found the same way and asked for their peers with
 * ibv_query_qp (qp_query events).  What cannot be found is reported, not guessed.
 */
'use strict';

(() => {
  const OWNER = 'verbs';
  const LIB = 'libibverbs.so.1';
  const api = sigmatrace;
  let lib = null;
  const hookedContexts = new Set(); // ctx pointers (strings) whose slots we replaced
  const F = {}; // NativeFunctions of libibverbs (the agent's own calls)

  function rfn(name, ret, args) {
    return api.fn(name, ret, args);
  }

  function vfmt(name, argTypes, args) {
    const buf = Memory.alloc(4096);
    const n = rfn(name, 'int', ['pointer', 'size_t'].concat(argTypes))(buf, 4096, ...args);
    return n > 0 ? buf.readUtf8String(n) : '';
  }

  function emit(ts, ev, fnName, fieldsText, ret) {
    let text = '"ev":' + JSON.stringify(ev) + ',"fn":' + JSON.stringify(fnName);
    if (fieldsText) text += ',' + fieldsText;
    if (ret !== undefined) text += ',"ret":' + ret;
    api.cold(ts, text);
  }

  function retOf(ptrRet) {
    return ptrRet.isNull() ? 0 : uint64(ptrRet.toString()).toString();
  }

  // ------------------------------------------------------------------ context hooks

  // The extended create calls (ibv_create_qp_ex, ibv_create_cq_ex) are inline in verbs.h and
  // call the provider through the verbs context: hook the provider functions they reach, once.
  const extHooked = new Set();

  function hookExtended(ctx) {
    const specs = [
      [0, 'ibv_create_qp_ex', 'qp_create', (ret, self) => vfmt('st_vfmt_qp_create', ['pointer', 'pointer'], [ret, self.attr])],
      [1, 'ibv_create_cq_ex', 'cq_create', (ret, self) => vfmt('st_vfmt_cq', ['pointer', 'pointer'], [ret, self.attr.add(Process.pointerSize * 2).readPointer()])],
    ];
    for (const [which, name, ev, fields] of specs) {
      const fn = rfn('st_verbs_ext_op', 'pointer', ['pointer', 'int'])(ctx, which);
      if (fn.isNull() || extHooked.has(fn.toString())) continue;
      extHooked.add(fn.toString());
      try {
        api.coldHook(fn, OWNER, name, {
          enter(args, self) { self.attr = args[1]; },
          leave(ret, self) {
            emit(self.ts, ev, name, ret.isNull() ? '"' + (which ? 'cq' : 'qp') + '":0' : fields(ret, self), retOf(ret));
          },
        });
      } catch (e) {
        api.error('verbs:' + name, e);
      }
    }
  }

  function hookContext(ctx, how) {
    hookExtended(ctx);
    const n = rfn('st_verbs_hook_context', 'int', ['pointer'])(ctx);
    if (n >= 0) hookedContexts.add(ctx.toString());
    const mask = rfn('st_verbs_hooked_mask', 'int', ['pointer'])(ctx);
    const slots = [];
    for (let s = 0; s < 4; s++) {
      if (mask & (1 << s)) slots.push(rfn('st_verbs_slot_name', 'pointer', ['int'])(s).readCString());
    }
    api.cold(api.now(), { ev: 'ctx_hooked', ctx, how, slots });
    return slots.length;
  }

  function portInfo(ctx) {
    // the agent's own queries: ports of the device, their LID and GID 0
    if (F.query_device === null || F.query_port === null) return;
    try {
      const da = Memory.alloc(rfn('st_verbs_sizeof', 'int', ['int'])(4));
      if (F.query_device(ctx, da) !== 0) return;
      const nports = da.add(rfn('st_verbs_offsetof', 'int', ['int'])(0)).readU8();
      const pa = Memory.alloc(rfn('st_verbs_sizeof', 'int', ['int'])(2));
      const gid = Memory.alloc(16);
      for (let port = 1; port <= nports; port++) {
        if (F.query_port(ctx, port, pa) !== 0) continue;
        const haveGid = F.query_gid !== null && F.query_gid(ctx, port, 0, gid) === 0;
        const text = vfmt('st_vfmt_port', ['pointer', 'int', 'pointer', 'pointer'], [ctx, port, pa, haveGid ? gid : ptr(0)]);
        api.cold(api.now(), '"ev":"port_info",' + text);
      }
    } catch (e) {
      api.error('verbs:port_info', e);
    }
  }

  function guidOf(dev) {
    if (F.get_device_guid === null) return '0';
    try {
      return uint64(F.get_device_guid(dev).toString()).toString();
    } catch (e) {
      return '0';
    }
  }

  // ------------------------------------------------------------------ cold hooks

  // A context the program opened (ibv_open_device, or mlx5dv_open_device through the mlx5
  // provider: DevX programs such as UCX open theirs that way, and its ops table is the same).
  function contextOpened(ts, fn, dev, ctx) {
    if (ctx.isNull()) {
      emit(ts, 'dev_open', fn, '"ctx":0', 0);
      return;
    }
    hookContext(ctx, 'open');
    const text = vfmt('st_vfmt_context', ['pointer', 'uint64'], [ctx, uint64(guidOf(dev))]);
    emit(ts, 'dev_open', fn, text, retOf(ctx));
    api.internal(() => portInfo(ctx));
  }

  // [export name, {enter(args, self), leave(ret, self)}]
  function coldHooks() {
    return [
      ['ibv_open_device', {
        enter(args, self) { self.dev = args[0]; },
        leave(ret, self) { contextOpened(self.ts, 'ibv_open_device', self.dev, ret); },
      }],
      ['ibv_close_device', {
        enter(args, self) {
          self.ctx = args[0];
          rfn('st_verbs_forget_context', 'void', ['pointer'])(args[0]);
          hookedContexts.delete(args[0].toString());
        },
        leave(ret, self) { emit(self.ts, 'dev_close', 'ibv_close_device', '"ctx":' + retOf(self.ctx), ret.toInt32()); },
      }],
      ['ibv_alloc_pd', {
        leave(ret, self) {
          emit(self.ts, 'pd_alloc', 'ibv_alloc_pd', ret.isNull() ? '"pd":0' : vfmt('st_vfmt_pd', ['pointer'], [ret]), retOf(ret));
        },
      }],
      ['ibv_dealloc_pd', {
        enter(args, self) { self.text = vfmt('st_vfmt_pd', ['pointer'], [args[0]]); },
        leave(ret, self) { emit(self.ts, 'pd_dealloc', 'ibv_dealloc_pd', self.text, ret.toInt32()); },
      }],
      ...['ibv_reg_mr', 'ibv_reg_mr_iova', 'ibv_reg_mr_iova2', 'ibv_reg_dmabuf_mr'].map((name) => [name, {
        enter(args, self) {
          // (pd, addr, len, access) | (pd, addr, len, iova, access) | dmabuf: (pd, off, len, iova, fd, access)
          self.iova = name === 'ibv_reg_mr' ? uint64(args[1].toString()) : uint64(args[3].toString());
          self.access = name === 'ibv_reg_mr' ? args[3].toInt32() : name === 'ibv_reg_dmabuf_mr' ? args[5].toInt32() : args[4].toInt32();
        },
        leave(ret, self) {
          const text = ret.isNull() ? '"mr":0' : vfmt('st_vfmt_mr', ['pointer', 'uint64', 'int'], [ret, self.iova, self.access]);
          emit(self.ts, 'mr_reg', name, text, retOf(ret));
        },
      }]),
      ['ibv_dereg_mr', {
        enter(args, self) { self.text = vfmt('st_vfmt_mr_keys', ['pointer'], [args[0]]); },
        leave(ret, self) { emit(self.ts, 'mr_dereg', 'ibv_dereg_mr', self.text, ret.toInt32()); },
      }],
      ['ibv_create_cq', {
        enter(args, self) { self.channel = args[3]; },
        leave(ret, self) {
          const text = ret.isNull() ? '"cq":0' : vfmt('st_vfmt_cq', ['pointer', 'pointer'], [ret, self.channel]);
          emit(self.ts, 'cq_create', 'ibv_create_cq', text, retOf(ret));
        },
      }],
      ['ibv_destroy_cq', {
        enter(args, self) { self.cq = args[0]; },
        leave(ret, self) { emit(self.ts, 'cq_destroy', 'ibv_destroy_cq', '"cq":' + retOf(self.cq), ret.toInt32()); },
      }],
      ['ibv_create_srq', {
        enter(args, self) { self.attr = args[1]; },
        leave(ret, self) {
          const text = ret.isNull() ? '"srq":0' : vfmt('st_vfmt_srq', ['pointer', 'pointer'], [ret, self.attr]);
          emit(self.ts, 'srq_create', 'ibv_create_srq', text, retOf(ret));
        },
      }],
      ['ibv_destroy_srq', {
        enter(args, self) { self.text = '"srq":' + retOf(args[0]); },
        leave(ret, self) { emit(self.ts, 'srq_destroy', 'ibv_destroy_srq', self.text, ret.toInt32()); },
      }],
      ['ibv_create_qp', {
        enter(args, self) { self.attr = args[1]; },
        leave(ret, self) {
          const text = ret.isNull() ? '"qp":0' : vfmt('st_vfmt_qp_create', ['pointer', 'pointer'], [ret, self.attr]);
          emit(self.ts, 'qp_create', 'ibv_create_qp', text, retOf(ret));
        },
      }],
      ['ibv_modify_qp', {
        enter(args, self) { self.qp = args[0]; self.attr = args[1]; self.mask = args[2].toInt32(); },
        leave(ret, self) {
          const text = vfmt('st_vfmt_qp_modify', ['pointer', 'pointer', 'int'], [self.qp, self.attr, self.mask]);
          emit(self.ts, 'qp_modify', 'ibv_modify_qp', text, ret.toInt32());
        },
      }],
      ['ibv_query_qp', {
        enter(args, self) { self.qp = args[0]; self.mask = args[2].toInt32(); },
        leave(ret, self) {
          emit(self.ts, 'qp_query_call', 'ibv_query_qp', vfmt('st_vfmt_qp', ['pointer'], [self.qp]) + ',"mask":' + self.mask, ret.toInt32());
        },
      }],
      ['ibv_qp_to_qp_ex', {
        // the ibv_wr_* send API: per-QP function pointers, hooked before the application can
        // use them (it needs this call to reach them)
        leave(ret, self) {
          if (ret.isNull()) return;
          const n = rfn('st_verbs_hook_qp_ex', 'int', ['pointer'])(ret);
          api.cold(self.ts, '"ev":"qp_ex","fn":"ibv_qp_to_qp_ex",' + vfmt('st_vfmt_qp', ['pointer'], [ret]) +
            ',"wr_hooks":' + n);
        },
      }],
      ['ibv_destroy_qp', {
        enter(args, self) {
          self.text = vfmt('st_vfmt_qp', ['pointer'], [args[0]]);
          rfn('st_verbs_forget_qp', 'void', ['pointer'])(args[0]);
        },
        leave(ret, self) { emit(self.ts, 'qp_destroy', 'ibv_destroy_qp', self.text, ret.toInt32()); },
      }],
    ];
  }

  function install(mods) {
    lib = mods[LIB];
    const installed = [];
    const failed = [];
    const need = (name, ret, args) => {
      const a = lib.findExportByName(name);
      return a === null ? null : new NativeFunction(a, ret, args);
    };
    F.query_device = need('ibv_query_device', 'int', ['pointer', 'pointer']);
    F.query_port = need('ibv_query_port', 'int', ['pointer', 'uint8', 'pointer']);
    F.query_gid = need('ibv_query_gid', 'int', ['pointer', 'uint8', 'int', 'pointer']);
    F.get_device_guid = need('ibv_get_device_guid', 'uint64', ['pointer']);
    F.get_device_list = need('ibv_get_device_list', 'pointer', ['pointer']);
    F.free_device_list = need('ibv_free_device_list', 'void', ['pointer']);
    F.open_device = need('ibv_open_device', 'pointer', ['pointer']);
    F.close_device = need('ibv_close_device', 'int', ['pointer']);
    F.query_qp = need('ibv_query_qp', 'int', ['pointer', 'pointer', 'int', 'pointer']);
    for (const [name, h] of coldHooks()) {
      const addr = lib.findExportByName(name);
      if (addr === null) {
        if (name === 'ibv_open_device' || name === 'ibv_create_qp') failed.push({ name, why: 'not exported' });
        continue;
      }
      try {
        api.coldHook(addr, OWNER, name, h);
        installed.push(name);
      } catch (e) {
        failed.push({ name, why: e.message || String(e) });
      }
    }
    installed.push('ops:post_send', 'ops:post_recv', 'ops:poll_cq', 'ops:post_srq_recv');
    api.verbsContextOpened = contextOpened; // for the mlx5 provider's mlx5dv_open_device
    return { installed, failed };
  }

  // ------------------------------------------------------------------ attach-mode discovery

  function pattern(p) {
    // little-endian bytes of a pointer as a Memory.scan pattern
    const b = Memory.alloc(8);
    b.writePointer(p);
    return Array.from(new Uint8Array(b.readByteArray(8))).map((x) => ('0' + x.toString(16)).slice(-2)).join(' ');
  }

  function off(i) { return rfn('st_verbs_offsetof', 'int', ['int'])(i); }

  function readable(p) {
    try { p.readU8(); return true; } catch (e) { return false; }
  }

  function fdTarget(fd) {
    try {
      const readlink = new NativeFunction(Module.getGlobalExportByName('readlink'), 'int', ['pointer', 'pointer', 'size_t']);
      const buf = Memory.alloc(512);
      const n = readlink(Memory.allocUtf8String('/proc/self/fd/' + fd), buf, 511);
      return n > 0 ? buf.readUtf8String(n) : null;
    } catch (e) {
      return null;
    }
  }

  // The provider's hot functions, learnt from throwaway contexts (one per device).
  function learnOps(devices) {
    const sets = [];
    api.internal(() => {
      for (const dev of devices) {
        const ctx = F.open_device(dev);
        if (ctx.isNull()) continue;
        sets.push({
          dev,
          ctx,
          post_send: ctx.add(off(1)).readPointer(),
          post_recv: ctx.add(off(2)).readPointer(),
          poll_cq: ctx.add(off(3)).readPointer(),
          fd: ctx.add(off(14)).readS32(),
          fdKind: fdTarget(ctx.add(off(14)).readS32()),
        });
      }
    });
    return sets;
  }

  function deviceList() {
    const n = Memory.alloc(4);
    const list = F.get_device_list(n);
    const devs = [];
    if (list.isNull()) return { list, devs };
    for (let i = 0; i < n.readS32(); i++) devs.push(list.add(i * Process.pointerSize).readPointer());
    return { list, devs };
  }

  function scanFor(p, exclude) {
    const hits = [];
    const pat = pattern(p);
    for (const r of Process.enumerateRanges({ protection: 'rw-', coalesce: false })) {
      if (r.file && r.file.path && /frida|sigmatrace_rt/.test(r.file.path)) continue;
      let found;
      try {
        found = Memory.scanSync(r.base, r.size, pat);
      } catch (e) {
        continue;
      }
      for (const m of found) if (!exclude(m.address)) hits.push(m.address);
    }
    return hits;
  }

  function findContexts() {
    const { list, devs } = api.internal(() => deviceList());
    if (devs.length === 0) return { contexts: [], why: 'no device' };
    const learnt = learnOps(devs);
    const throwaway = new Set(learnt.map((s) => s.ctx.toString()));
    const devSet = new Set(devs.map((d) => d.toString()));
    const found = new Map(); // ctx -> info
    const rejected = [];
    for (const s of learnt) {
      for (const hit of scanFor(s.post_send, () => false)) {
        const ctx = hit.sub(off(1));
        if (throwaway.has(ctx.toString()) || found.has(ctx.toString())) continue;
        try {
          const ok = ctx.add(off(2)).readPointer().equals(s.post_recv) &&
            ctx.add(off(3)).readPointer().equals(s.poll_cq) &&
            devSet.has(ctx.add(off(5)).readPointer().toString());
          if (!ok) continue;
          // a context closed earlier can leave its bytes behind in freed memory: a live one
          // still holds its command descriptor, open on the same kind of file as the
          // throwaway's (a provider that uses none, like the throwaway, must use none either)
          const fd = ctx.add(off(14)).readS32();
          const kind = fd < 0 ? null : fdTarget(fd);
          if (s.fd >= 0 ? (kind === null || kind !== s.fdKind) : fd >= 0) {
            rejected.push({ ctx, why: 'command descriptor ' + fd + ' is not open as ' + s.fdKind });
            continue;
          }
          found.set(ctx.toString(), { ctx, fd });
        } catch (e) {
          continue;
        }
      }
    }
    // two candidates sharing one descriptor: at most one is alive; hook neither
    const byFd = new Map();
    for (const c of found.values()) byFd.set(c.fd, (byFd.get(c.fd) || 0) + 1);
    const contexts = [];
    for (const c of found.values()) {
      if (byFd.get(c.fd) > 1) rejected.push({ ctx: c.ctx, why: 'ambiguous: descriptor ' + c.fd + ' shared' });
      else contexts.push(c.ctx);
    }
    api.internal(() => {
      for (const s of learnt) F.close_device(s.ctx);
      if (!list.isNull()) F.free_device_list(list);
    });
    return { contexts, rejected };
  }

  // QPs of a context made before tracing: structures whose first field is the context and
  // whose CQs and PD point back at it.
  function findQps(ctx) {
    const qps = [];
    const seen = new Set();
    for (const hit of scanFor(ctx, () => false)) {
      try {
        const qp = hit;
        const qpn = qp.add(off(6)).readU32();
        const state = qp.add(off(7)).readU32();
        const type = qp.add(off(8)).readU32();
        if (qpn === 0 || qpn > 0xffffff || state > 7 || [2, 3, 4, 8, 9, 10, 0xff].indexOf(type) < 0) continue;
        const scq = qp.add(off(9)).readPointer();
        const rcq = qp.add(off(10)).readPointer();
        const pd = qp.add(off(11)).readPointer();
        if (scq.isNull() || pd.isNull() || !readable(scq) || !readable(pd)) continue;
        if (!scq.add(off(12)).readPointer().equals(ctx) || !pd.add(off(13)).readPointer().equals(ctx)) continue;
        if (!rcq.isNull() && !rcq.add(off(12)).readPointer().equals(ctx)) continue;
        if (seen.has(qp.toString())) continue;
        seen.add(qp.toString());
        qps.push(qp);
      } catch (e) {
        continue;
      }
    }
    return qps;
  }

  function queryQp(qp) {
    if (F.query_qp === null) {
      api.cold(api.now(), { ev: 'qp_query', qp, qpn: qp.add(off(6)).readU32(), known: false, why: 'ibv_query_qp not exported' });
      return false;
    }
    const attr = Memory.alloc(rfn('st_verbs_sizeof', 'int', ['int'])(0));
    const init = Memory.alloc(rfn('st_verbs_sizeof', 'int', ['int'])(1));
    // IBV_QP_STATE | IBV_QP_AV | IBV_QP_PORT | IBV_QP_DEST_QPN | IBV_QP_CAP
    const mask = 1 | (1 << 7) | (1 << 5) | (1 << 20) | (1 << 19);
    const rc = api.internal(() => F.query_qp(qp, attr, mask, init));
    if (rc !== 0) {
      api.cold(api.now(), { ev: 'qp_query', qp, qpn: qp.add(off(6)).readU32(), known: false, why: 'ibv_query_qp returned ' + rc });
      return false;
    }
    const text = vfmt('st_vfmt_qp_query', ['pointer', 'pointer', 'pointer'], [qp, attr, init]);
    api.cold(api.now(), '"ev":"qp_query","known":true,' + text);
    return true;
  }

  function afterInstall() {
    if (!api.attached) return;
    if (F.get_device_list === null || F.open_device === null) {
      api.error('verbs:discover', 'libibverbs lacks ibv_get_device_list/ibv_open_device: contexts opened before attach are not traced');
      return;
    }
    const { contexts, rejected, why } = findContexts();
    for (const r of rejected || []) api.cold(api.now(), { ev: 'ctx_rejected', ctx: r.ctx, why: r.why });
    let nqp = 0;
    for (const ctx of contexts) {
      hookContext(ctx, 'scan');
      const text = vfmt('st_vfmt_context', ['pointer', 'uint64'], [ctx, uint64(0)]);
      api.cold(api.now(), '"ev":"dev_open","fn":null,"preexisting":true,' + text);
      for (const qp of findQps(ctx)) {
        queryQp(qp);
        nqp++;
      }
    }
    api.message('verbs:discovered', { contexts: contexts.length, qps: nqp, rejected: (rejected || []).length, why: why || null });
  }

  function uninstall() {
    delete api.verbsContextOpened;
    for (const c of hookedContexts) rfn('st_verbs_unhook_context', 'int', ['pointer'])(ptr(c));
    hookedContexts.clear();
    extHooked.clear();
  }

  api.registerProvider({ name: OWNER, libraries: [LIB], install, afterInstall, uninstall });
})();
