/*
 * sigmatrace agent, mlx5 provider (libmlx5: mlx5dv devx).
 *
 * What a GPU-initiated library builds with devx (UARs, umems in GPU memory, QPs and CQs from
 * PRM command mailboxes, their transitions) is read by the runtime (native/runtime/
 * devx_state.c): these hooks only hand it the arguments and results.  Cold path: Interceptor
 * attach.  mlx5dv_devx_free_uar stops the UAR's repeater before the register goes away.
 * mlx5dv_init_obj tells the runtime of send queues the program writes itself (cpu_sq.h).
 * mlx5dv_open_device's context goes to the verbs provider, as ibv_open_device's do.
 */
'use strict';

(() => {
  const OWNER = 'mlx5';
  const LIB = 'libmlx5.so.1';
  const api = sigmatrace;

  function rfn(name, args) {
    return api.fn(name, 'void', args);
  }

  // [export, {enter(args, self), leave(ret, self)}]
  const hooks = [
    // a verbs context opened the DevX way: the verbs provider (when selected) hooks its ops
    ['mlx5dv_open_device', {
      enter(args, self) { self.dev = args[0]; },
      leave(ret, self) {
        if (api.verbsContextOpened) api.verbsContextOpened(self.ts, 'mlx5dv_open_device', self.dev, ret);
      },
    }],
    ['mlx5dv_devx_alloc_uar', {
      enter(args, self) { self.ctx = args[0]; self.flags = args[1].toUInt32(); },
      leave(ret, self) { rfn('st_devx_uar_alloc', ['pointer', 'uint32', 'pointer', 'uint64'])(self.ctx, self.flags, ret, self.ts); },
    }],
    ['mlx5dv_devx_free_uar', {
      enter(args, self) {
        self.uar = args[0];
        rfn('st_devx_uar_free_enter', ['pointer'])(args[0]);
      },
      leave(ret, self) { rfn('st_devx_uar_free', ['pointer', 'uint64'])(self.uar, self.ts); },
    }],
    ['mlx5dv_devx_umem_reg', {
      enter(args, self) { self.a = [args[0], args[1], uint64(args[2].toString()), args[3].toUInt32()]; },
      leave(ret, self) {
        rfn('st_devx_umem_reg', ['pointer', 'pointer', 'uint64', 'uint32', 'pointer', 'uint64'])(...self.a, ret, self.ts);
      },
    }],
    ['mlx5dv_devx_umem_reg_ex', {
      enter(args, self) { self.ctx = args[0]; self.in = args[1]; },
      leave(ret, self) { rfn('st_devx_umem_reg_ex', ['pointer', 'pointer', 'pointer', 'uint64'])(self.ctx, self.in, ret, self.ts); },
    }],
    ['mlx5dv_devx_umem_dereg', {
      enter(args, self) { self.umem = args[0]; },
      leave(ret, self) { rfn('st_devx_umem_dereg', ['pointer', 'int', 'uint64'])(self.umem, ret.toInt32(), self.ts); },
    }],
    ['mlx5dv_devx_obj_create', {
      enter(args, self) { self.a = [args[0], args[1], uint64(args[2].toString()), args[3], uint64(args[4].toString())]; },
      leave(ret, self) {
        rfn('st_devx_obj_create', ['pointer', 'pointer', 'uint64', 'pointer', 'uint64', 'pointer', 'uint64'])(...self.a, ret, self.ts);
      },
    }],
    ['mlx5dv_devx_obj_modify', {
      enter(args, self) { self.a = [args[0], args[1], uint64(args[2].toString()), args[3], uint64(args[4].toString())]; },
      leave(ret, self) {
        rfn('st_devx_obj_modify', ['pointer', 'pointer', 'uint64', 'pointer', 'uint64', 'int', 'uint64'])(...self.a, ret.toInt32(), self.ts);
      },
    }],
    // the direct-verbs view of a verbs QP: a send queue the program then writes itself
    ['mlx5dv_init_obj', {
      enter(args, self) { self.obj = args[0]; self.types = uint64(args[1].toString()); },
      leave(ret, self) {
        rfn('st_mlx5_init_obj', ['pointer', 'uint64', 'int', 'uint64'])(self.obj, self.types, ret.toInt32(), self.ts);
      },
    }],
    // DC QPs (and any QP made the mlx5dv way): a qp_create naming DCI / DCT, and a DCT's key
    ['mlx5dv_create_qp', {
      enter(args, self) { self.attr = args[1]; self.dv = args[2]; },
      leave(ret, self) {
        let text = '"ev":"qp_create","fn":"mlx5dv_create_qp",';
        if (ret.isNull()) {
          text += '"qp":0,"ret":0';
        } else {
          const buf = Memory.alloc(4096);
          const n = api.fn('st_vfmt_mlx5dv_qp_create', 'int', ['pointer', 'size_t', 'pointer', 'pointer', 'pointer'])(
            buf, 4096, ret, self.attr, self.dv);
          text += (n > 0 ? buf.readUtf8String(n) + ',' : '') + '"ret":' + uint64(ret.toString()).toString();
        }
        api.cold(self.ts, text);
      },
    }],
    // a DCI's mlx5dv_wr_set_dc_addr: the runtime hooks it, to record each work request's DCT
    ['mlx5dv_qp_ex_from_ibv_qp_ex', {
      enter(args, self) { self.qpx = args[0]; },
      leave(ret, self) {
        if (ret.isNull()) return;
        api.fn('st_verbs_hook_dv_qp_ex', 'int', ['pointer', 'pointer'])(self.qpx, ret);
      },
    }],
    ['mlx5dv_devx_obj_destroy', {
      enter(args, self) { self.obj = args[0]; },
      leave(ret, self) { rfn('st_devx_obj_destroy', ['pointer', 'int', 'uint64'])(self.obj, ret.toInt32(), self.ts); },
    }],
  ];

  function install(mods) {
    const lib = mods[LIB];
    const installed = [];
    const failed = [];
    for (const [name, h] of hooks) {
      const addr = lib.findExportByName(name);
      if (addr === null) {
        failed.push({ name, why: 'not exported' });
        continue;
      }
      try {
        api.coldHook(addr, OWNER, name, h);
        installed.push(name);
      } catch (e) {
        failed.push({ name, why: e.message || String(e) });
      }
    }
    return { installed, failed };
  }

  function afterInstall() {
    // UARs mapped before we arrived may already be in the GPU's hands: say which
    if (api.attached) api.fn('st_devx_scan_preexisting', 'int', [])();
  }

  api.registerProvider({ name: OWNER, libraries: [LIB], install, afterInstall });
})();
