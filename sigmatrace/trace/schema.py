"""The JSON types of session.json, meta.json and cold.jsonl (FORMAT.md), checked when read.

A value of the wrong JSON type (a string where FORMAT.md promises an integer, `"argv": 5`) is
damage: the reader skips what holds it (a cold event, a meta.json or session.json key) and says
so, so that no consumer meets a type it was not promised.  Keys not listed here are passed on
unchecked (producers only add).  `None` is accepted everywhere: readers treat null as absent.
"""
from __future__ import annotations

INT, STR, BOOL, LIST, DICT = "integer", "string", "boolean", "list", "object"
# the runtime (C) writes flags as 0/1, the agent (JavaScript) as true/false; port_info's state is
# a number (ibv_port_state), a QP's a name
FLAG, STATE = "boolean or 0/1", "string or integer"

_PY = {INT: (int,), STR: (str,), BOOL: (bool,), LIST: (list,), DICT: (dict,), FLAG: (bool, int), STATE: (str, int)}

SESSION = {
    "format": STR, "version": INT, "sigmatrace_version": STR, "command": STR, "mode": STR,
    "providers": LIST, "doorbells": STR, "host": STR, "started_ns": INT, "ended_ns": INT, "status": STR,
    "processes": LIST, "process_dirs": DICT, "exit_code": INT, "warnings": LIST, "controller_pid": INT,
}

META = {
    "pid": INT, "ppid": INT, "exe": STR, "argv": LIST, "host": STR, "started_ns": INT, "env": DICT,
    "attached": BOOL, "libraries": LIST, "mode": STR, "providers": DICT, "hooks": DICT, "discovered": DICT,
    "end": STR, "error": STR,
}
# list keys whose items have one type
META_ITEMS = {"argv": STR, "libraries": DICT}
SESSION_ITEMS = {"processes": INT}

# cold.jsonl: the type of a field whatever the event kind...
COLD = {
    "ts": INT, "tid": INT, "ev": STR, "fn": STR,
    "ctx": INT, "pd": INT, "qp": INT, "qpn": INT, "mr": INT, "addr": INT, "len": INT, "iova": INT,
    "access": INT, "lkey": INT, "rkey": INT, "cq": INT, "cqe": INT, "channel": INT, "srq": INT,
    "max_wr": INT, "max_sge": INT, "max_send_wr": INT, "max_recv_wr": INT, "max_send_sge": INT,
    "max_recv_sge": INT, "max_inline_data": INT, "mask": INT, "port": INT, "dest_qpn": INT, "dlid": INT,
    "sgid_index": INT, "sl": INT, "path_mtu": INT, "rq_psn": INT, "sq_psn": INT, "lid": INT, "guid": INT,
    "reg_addr": INT, "base_addr": INT, "page_id": INT, "umem": INT, "umem_id": INT, "size": INT,
    "gpu": INT, "obj": INT, "log_sq_size": INT, "sq_slots": INT, "sq_addr": INT, "sq_umem_id": INT,
    "sq_umem_offset": INT, "rq_bytes": INT, "dbr_addr": INT, "dbr_umem_id": INT, "uar_page": INT,
    "cqn_snd": INT, "cqn_rcv": INT, "cqn": INT, "log_cq_size": INT, "cq_addr": INT, "cq_umem_id": INT,
    "remote_qpn": INT, "rlid": INT, "dptr": INT, "real_dptr": INT, "repeater": INT, "uar_reg_addr": INT,
    "fake_host": INT, "fake_dptr": INT, "cpu": INT, "thread": INT, "pages": INT, "doorbells": INT,
    "cpu_ns": INT, "wall_ns": INT, "spins": INT, "backoffs": INT, "sleeps": INT, "armed_copies": INT,
    "copied_after_forward": INT, "lines": INT, "doorbell_mappings": INT, "unwatched_pages": INT,
    "ring_records": INT, "slots": LIST, "opcode": INT, "wr_hooks": INT, "base": INT, "qkey": INT, "dc_key": INT,
    "dev": STR, "gid": STR, "link_layer": STR, "type": STR, "state": STATE, "dgid": STR, "rgid": STR,
    "st": STR, "mem": STR, "kind": STR, "symbol": STR, "path": STR, "build_id": STR, "why": STR,
    "where": STR, "msg": STR, "provider": STR, "via": STR, "api": STR, "how": STR,
    "installed": LIST, "failed": LIST,
    "substituted": FLAG, "preexisting": FLAG, "wrapped": FLAG, "available": FLAG, "is_global": FLAG,
    "sq_sig_all": FLAG,
}
# ...and the fields whose type depends on the kind of event
COLD_BY_EV = {
    "devx_uar_alloc": {"uar": INT}, "devx_uar_free": {"uar": INT}, "cu_host_register": {"uar": FLAG},
    "cu_device_pointer": {"host": INT}, "runtime": {"mode": INT, "attached": FLAG},
    "repeater_start": {"mode": STR}, "repeater_stop": {"mode": STR, "why": STR},
    "uar_scan": {"known": INT}, "qp_query": {"known": FLAG}, "devx_qp_modify": {"op": STR},
}


def type_of(value) -> str:
    """The JSON name of a value's type."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return "number"
    for name, py in _PY.items():
        if isinstance(value, py):
            return name
    return "null" if value is None else type(value).__name__


def _a(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def fits(value, want: str) -> bool:
    if value is None:
        return True
    if want in (INT, STATE) and isinstance(value, bool):
        return False
    if want == INT:
        return isinstance(value, int)
    return isinstance(value, _PY[want])


def wrong_keys(obj: dict, types: dict, items: dict | None = None) -> list[str]:
    """Why each key of `obj` whose value is not of its listed type is wrong, one phrase a key."""
    out = []
    for key, want in types.items():
        if key not in obj or fits(obj[key], want):
            if key in obj and items and key in items and isinstance(obj[key], list):
                bad = [v for v in obj[key] if not fits(v, items[key]) or v is None]
                if bad:
                    out.append(f"'{key}' holds {_a(type_of(bad[0]))} where each item is {_a(items[key])}")
            continue
        out.append(f"'{key}' is {_a(type_of(obj[key]))}, expected {_a(want)}")
    return out


def cold_wrong(ev: dict) -> str | None:
    """Why a cold event breaks FORMAT.md's types (its first wrong field), or None."""
    kind = ev.get("ev")
    special = COLD_BY_EV.get(kind, {}) if isinstance(kind, str) else {}
    for key, value in ev.items():
        want = special.get(key) or COLD.get(key)
        if want is not None and not fits(value, want):
            return f"'{key}' is {_a(type_of(value))}, expected {_a(want)}"
    for key in ("ts", "tid"):
        if ev.get(key) is None:
            return f"no '{key}'"
    return None
