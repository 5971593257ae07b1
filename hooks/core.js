/*
 * sigmatrace agent, core part.  The controller loads this file followed by one file per
 * requested provider (verbs.js, mlx5.js, cuda.js) as a single script.
 *
 * Core loads the runtime (libsigmatrace_rt.so) into the process, watches library loads (dlopen)
 * and symbol resolution (dlsym, dlvsym), installs each provider once its libraries are present,
 * and talks to the controller.  Providers never talk to the controller directly.
 *
 * Provider interface (a provider file calls this once at load):
 *
 *   sigmatrace.registerProvider({
 *     name: 'verbs',                       // as given to --providers
 *     libraries: ['libibverbs.so.1'],      // install() runs once all of these are loaded
 *     install(modules, api) {              // modules: {soname: Module}; returns
 *       return {installed: [...names], failed: [{name, why}]};
 *     },
 *     afterInstall(api) {},                // optional: attach-mode discovery, after install
 *     uninstall(api) {},                   // optional: undo what install did (listeners made
 *                                          //   with api.attach are detached by core)
 *     onResolve(symbol, version, address) {},  // optional: a dlsym/dlvsym result; return a
 *                                          //   NativePointer to hand the caller instead
 *   });
 *
 * `api` (also `sigmatrace` itself) offers:
 *   api.rt                 the runtime Module (getExportByName for st_* functions)
 *   api.fn(name, ret, args)  a cached NativeFunction of the runtime
 *   api.now()              TSC (UInt64) for event timestamps
 *   api.cold(ts, fields)   append a cold event; `fields` a JSON fragment string without braces
 *                          (e.g. '"ev":"pd_alloc","pd":123') or an object (numbers, strings,
 *                          booleans, arrays; NativePointer/UInt64/Int64 become JSON integers)
 *   api.attach(target, callbacks, owner)  Interceptor.attach, remembered for uninstall
 *   api.config             the session configuration given by the controller
 *   api.attached           true when tracing began after the process started
 *   api.message(type, payload)  a message to the controller (types are namespaced)
 *   api.error(where, err)  report something of ours that failed (cold event + message)
 *   api.internal(fn)       run fn with the agent's own calls hidden from the cold hooks
 *   api.inside(owner)      the cold-hook nesting guard: true if a hooked call of `owner` is
 *                          already running on this thread (inner calls are not recorded)
 *   api.coldHook(target, owner, name, {enter(args, self), leave(ret, self)})
 *                          api.attach with that guard: enter/leave (each optional) run for the
 *                          outermost call only, self.ts is its entry time, and an exception is
 *                          reported as `owner:name` while the call goes on
 */
'use strict';

const sigmatrace = (() => {
  const providers = new Map(); // name -> {spec, state, listeners, installed, failed}
  const coreListeners = [];
  const nativeFns = new Map();
  let rt = null;
  let config = null;
  let started = false;
  let internalDepth = 0;
  const depth = new Map(); // `${tid}:${owner}` -> nesting depth of hooked cold calls

  const PROVIDER_STATE = { not_requested: 0, waiting: 1, installed: 2, failed: 3 };

  function message(type, payload) {
    send(Object.assign({ type }, payload || {}));
  }

  function fn(name, ret, args) {
    let f = nativeFns.get(name);
    if (f === undefined) {
      f = new NativeFunction(rt.getExportByName(name), ret, args);
      nativeFns.set(name, f);
    }
    return f;
  }

  function now() {
    return rt === null ? uint64(0) : fn('st_tsc', 'uint64', [])();
  }

  function jsonValue(v) {
    if (v === null || v === undefined) return 'null';
    if (v instanceof NativePointer) return uint64(v.toString()).toString();
    if (v instanceof UInt64 || v instanceof Int64) return v.toString();
    if (Array.isArray(v)) return '[' + v.map(jsonValue).join(',') + ']';
    if (typeof v === 'object') {
      return '{' + Object.keys(v).map((k) => JSON.stringify(k) + ':' + jsonValue(v[k])).join(',') + '}';
    }
    return JSON.stringify(v);
  }

  function fields(obj) {
    return Object.keys(obj).map((k) => JSON.stringify(k) + ':' + jsonValue(obj[k])).join(',');
  }

  function cold(ts, f) {
    if (rt === null) return;
    const text = typeof f === 'string' ? f : fields(f);
    fn('st_cold', 'void', ['uint64', 'pointer'])(ts, Memory.allocUtf8String(text));
  }

  function error(where, err) {
    const msg = (err && err.message) ? err.message : String(err);
    cold(now(), { ev: 'error', where, msg });
    message('error', { where, msg });
  }

  function attach(target, callbacks, owner) {
    const l = Interceptor.attach(target, callbacks);
    const p = owner ? providers.get(owner) : null;
    (p ? p.listeners : coreListeners).push(l);
    return l;
  }

  function internal(f) {
    internalDepth++;
    try {
      return f();
    } finally {
      internalDepth--;
    }
  }

  // Cold hooks call enter(owner) in onEnter and leave(owner) in onLeave; a call made while
  // another hooked call of the same owner runs on this thread (ibv_reg_mr -> ibv_reg_mr_iova2)
  // is nested and not recorded.  The agent's own calls (internal()) are never recorded.
  function enter(owner) {
    const key = Process.getCurrentThreadId() + ':' + owner;
    const d = depth.get(key) || 0;
    depth.set(key, d + 1);
    return d === 0 && internalDepth === 0;
  }

  function leave(owner) {
    const key = Process.getCurrentThreadId() + ':' + owner;
    const d = (depth.get(key) || 1) - 1;
    if (d === 0) depth.delete(key); else depth.set(key, d);
  }

  function inside(owner) {
    return (depth.get(Process.getCurrentThreadId() + ':' + owner) || 0) > 0;
  }

  // The guarded cold hook every provider uses (see the header): one place for the nesting
  // guard, the entry time and containing a hook's own exceptions.
  function coldHook(target, owner, name, h) {
    const where = owner + ':' + name;
    return attach(target, {
      onEnter(args) {
        this.rec = enter(owner);
        if (!this.rec) return;
        this.ts = now();
        if (h.enter) {
          try { h.enter(args, this); } catch (e) { error(where, e); this.rec = false; }
        }
      },
      onLeave(ret) {
        leave(owner);
        if (!this.rec || !h.leave) return;
        try { h.leave(ret, this); } catch (e) { error(where, e); }
      },
    }, owner);
  }

  function registerProvider(spec) {
    providers.set(spec.name, { spec, state: 'registered', listeners: [], installed: [], failed: [] });
  }

  function setProviderState(name, state, hooks) {
    if (rt === null) return;
    fn('st_provider', 'void', ['pointer', 'int', 'int'])(Memory.allocUtf8String(name), PROVIDER_STATE[state], hooks);
  }

  // A library by the name programs load it by (its SONAME, 'libcuda.so.1').  The module list of
  // a process we attach to names each library by the file mapped, which is what the SONAME link
  // points to: libibverbs.so.1.14.44.0, libmlx5.so.1.24.44.0, libcuda.so.580.95.05.
  function findLibrary(lib, loaded) {
    const stem = lib.replace(/\.so(\.\d+)*$/, '.so'); // libcuda.so.1 -> libcuda.so
    let versioned = null, other = null;
    for (const mod of loaded) {
      if (mod.name === lib) return mod;
      if (versioned === null && mod.name.startsWith(lib + '.')) versioned = mod; // libibverbs.so.1.14.44.0
      if (other === null && mod.name.startsWith(stem + '.')) other = mod; // libcuda.so.580.95.05
    }
    return versioned || other;
  }

  // The modules of each of spec's libraries in `loaded` (Process.enumerateModules()), or null.
  function modulesFor(spec, loaded) {
    const found = {};
    for (const lib of spec.libraries) {
      const m = findLibrary(lib, loaded);
      if (m === null) return null;
      found[lib] = m;
    }
    return found;
  }

  // Install every requested provider whose libraries are all loaded now.
  function installReady() {
    let loaded = null; // listed when a provider waits, once until an install runs
    for (const [name, p] of providers) {
      if (p.state !== 'waiting') continue;
      if (loaded === null) loaded = Process.enumerateModules();
      const mods = modulesFor(p.spec, loaded);
      if (mods === null) continue;
      // A provider's install may load libraries itself (the cuda provider's runtime looks the
      // driver up with dlopen): the dlopen hook must not start a second install of it meanwhile.
      p.state = 'installing';
      loaded = null; // an install may load libraries: list them again for the next provider
      let result;
      try {
        result = internal(() => p.spec.install(mods, api)) || { installed: [], failed: [] };
      } catch (e) {
        result = { installed: [], failed: [{ name: 'install', why: e.message || String(e) }] };
      }
      p.installed = result.installed || [];
      p.failed = result.failed || [];
      p.state = p.installed.length > 0 ? 'installed' : 'failed';
      setProviderState(name, p.state, p.installed.length);
      cold(now(), { ev: 'hooks', provider: name, installed: p.installed, failed: p.failed });
      message('hooks:installed', { provider: name, installed: p.installed, failed: p.failed,
        libraries: Object.values(mods).map((m) => ({ name: m.name, path: m.path, base: m.base })) });
      if (p.state === 'installed' && p.spec.afterInstall) {
        try {
          p.spec.afterInstall(api);
        } catch (e) {
          error(name + ':afterInstall', e);
        }
      }
    }
  }

  // GNU build-id of a mapped module, read from its program headers in memory (null if none).
  function buildId(m) {
    try {
      const b = m.base;
      if (b.readU32() !== 0x464c457f) return null;
      const phoff = b.add(0x20).readU64().toNumber();
      const phentsize = b.add(0x36).readU16();
      const phnum = b.add(0x38).readU16();
      // the load bias: first PT_LOAD's vaddr is subtracted from note vaddrs
      let bias = null;
      const notes = [];
      for (let i = 0; i < phnum; i++) {
        const ph = b.add(phoff + i * phentsize);
        const type = ph.readU32();
        const vaddr = ph.add(0x10).readU64().toNumber();
        const memsz = ph.add(0x28).readU64().toNumber();
        if (type === 1 && bias === null) bias = vaddr - (ph.add(0x08).readU64().toNumber());
        if (type === 4) notes.push([vaddr, memsz]);
      }
      for (const [vaddr, size] of notes) {
        let p = b.add(vaddr - (bias || 0));
        const end = p.add(size);
        while (p.compare(end) < 0) {
          const namesz = p.readU32();
          const descsz = p.add(4).readU32();
          const type = p.add(8).readU32();
          const name = p.add(12);
          const desc = name.add((namesz + 3) & ~3);
          if (type === 3 && namesz === 4 && name.readCString() === 'GNU') {
            return Array.from(new Uint8Array(desc.readByteArray(descsz))).map((x) => ('0' + x.toString(16)).slice(-2)).join('');
          }
          p = desc.add((descsz + 3) & ~3);
        }
      }
    } catch (e) {
      return null;
    }
    return null;
  }

  const knownModules = new Set();

  // Libraries mapped since we last looked: a `library` event each, and one message.
  function newModules(emitEvents) {
    const added = [];
    for (const m of Process.enumerateModules()) {
      if (knownModules.has(m.path)) continue;
      knownModules.add(m.path);
      added.push(m);
    }
    if (added.length === 0) return;
    if (emitEvents) {
      for (const m of added) cold(now(), { ev: 'library', path: m.path, build_id: buildId(m), base: m.base });
    }
    message('process:modules', { paths: added.map((m) => m.path) });
  }

  function installLoaderHooks() {
    const libc = Process.getModuleByName('libc.so.6');
    const dlopen = libc.findExportByName('dlopen');
    if (dlopen !== null) {
      attach(dlopen, {
        onEnter(args) {
          this.path = args[0].isNull() ? null : args[0].readCString();
        },
        onLeave(ret) {
          if (ret.isNull() || this.path === null || internalDepth > 0) return;
          newModules(true);
          installReady();
        },
      });
    }
    const resolve = (via) => ({
      onEnter(args) {
        this.symbol = args[1].isNull() ? null : args[1].readCString();
        this.version = via === 'dlvsym' && !args[2].isNull() ? args[2].readCString() : null;
      },
      onLeave(ret) {
        if (this.symbol === null || internalDepth > 0 || !interesting(this.symbol)) return;
        cold(now(), { ev: 'resolve', via, symbol: this.symbol, version: this.version, addr: ret });
        for (const [, p] of providers) {
          if (p.state !== 'installed' || !p.spec.onResolve) continue;
          try {
            const repl = p.spec.onResolve(this.symbol, this.version, ret);
            if (repl) ret.replace(repl);
          } catch (e) {
            error(p.spec.name + ':onResolve', e);
          }
        }
      },
    });
    for (const via of ['dlsym', 'dlvsym']) {
      const f = libc.findExportByName(via);
      if (f !== null) attach(f, resolve(via));
    }
  }

  // Symbols worth a `resolve` event: the layers sigmatrace traces.
  function interesting(symbol) {
    return /^(ibv_|mlx5dv_|__ibv_|cu[A-Z]|cuda|nccl|ucp_|uct_|fi_|cxi_)/.test(symbol);
  }

  function runtimeConfig(c) {
    const lines = [
      'dir=' + c.dir,
      'mode=' + c.mode,
      'doorbells=' + (c.doorbells || 'off'),
      'controller_pid=' + (c.controller_pid || 0),
      'attached=' + (c.attached ? 1 : 0),
    ];
    for (const k of Object.keys(c.runtime || {})) lines.push(k + '=' + c.runtime[k]);
    return lines.join('\n');
  }

  function init(c) {
    if (started) return { ok: false, error: 'tracing already started in this agent' };
    config = c;
    try {
      rt = Module.load(c.runtime_path);
    } catch (e) {
      return { ok: false, error: 'cannot load the runtime ' + c.runtime_path + ': ' + (e.message || e) };
    }
    nativeFns.clear();
    const rc = fn('st_init', 'int', ['pointer'])(Memory.allocUtf8String(runtimeConfig(c)));
    if (rc !== 0) {
      const why = fn('st_last_error', 'pointer', [])().readCString();
      rt = null;
      return { ok: false, error: 'the runtime did not start (' + why + ')' };
    }
    started = true;
    const requested = new Set(c.providers || []);
    for (const [name, p] of providers) {
      if (requested.has(name)) {
        p.state = 'waiting';
        setProviderState(name, 'waiting', 0);
      } else {
        p.state = 'not_requested';
      }
    }
    newModules(false);
    try {
      installLoaderHooks();
    } catch (e) {
      error('core:loader-hooks', e);
    }
    installReady();
    const status = {};
    for (const [name, p] of providers) status[name] = p.state;
    message('agent:ready', { providers: status, pid: Process.id, arch: Process.arch });
    return { ok: true, providers: status };
  }

  function stop(reason) {
    // hooks first (no new cold events), then the runtime (restores slots, final flush)
    for (const [name, p] of providers) {
      if (p.state !== 'installed') continue;
      try {
        if (p.spec.uninstall) p.spec.uninstall(api);
      } catch (e) {
        error(name + ':uninstall', e);
      }
      for (const l of p.listeners) l.detach();
      p.listeners = [];
      p.state = 'registered';
    }
    for (const l of coreListeners) l.detach();
    coreListeners.length = 0;
    Interceptor.flush();
    if (rt !== null && started) fn('st_stop', 'void', ['int'])(reason === 'exit' ? 3 : 1);
    started = false;
    return { ok: true };
  }

  function status() {
    const out = {};
    for (const [name, p] of providers) out[name] = { state: p.state, installed: p.installed, failed: p.failed };
    return { started, providers: out };
  }

  const api = {
    registerProvider, message, fn, now, cold, error, attach, coldHook, internal, enter, leave, inside,
    get rt() { return rt; },
    get config() { return config; },
    get attached() { return !!(config && config.attached); },
  };

  rpc.exports = {
    init,
    stop,
    status,
    providers() { return Array.from(providers.keys()); },
  };

  return api;
})();
