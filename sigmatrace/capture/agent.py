"""The agent: its source (core.js, then one file per provider) and its messages.

Messages from the agent carry a namespaced `type`; `AgentMessages.route` is the one place the
controller handles them.  Requests to the agent are Frida RPC calls: init(config), stop(reason),
status().
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .. import paths

# Message types the agent sends (hooks/core.js and the providers).
AGENT_READY = "agent:ready"
HOOKS_INSTALLED = "hooks:installed"
PROCESS_MODULES = "process:modules"
VERBS_DISCOVERED = "verbs:discovered"
ERROR = "error"


def agent_source(providers: list[str]) -> str:
    """core.js followed by the requested providers' files, as one script."""
    parts = [paths.hooks_file("core.js").read_text()]
    for name in providers:
        parts.append(f"\n// ---- provider: {name}\n")
        parts.append(paths.hooks_file(f"{name}.js").read_text())
    return "".join(parts)


@dataclass
class AgentMessages:
    """Routes one process's agent messages to handlers by type; unknown types are kept."""

    handlers: dict[str, Callable[[dict], None]] = field(default_factory=dict)
    unknown: list[dict] = field(default_factory=list)
    script_errors: list[str] = field(default_factory=list)

    def on(self, type_: str, handler: Callable[[dict], None]) -> None:
        self.handlers[type_] = handler

    def route(self, message: dict, data: bytes | None) -> None:
        if message.get("type") == "error" and "payload" not in message:
            # an uncaught exception in the agent script itself
            self.script_errors.append(message.get("description") or str(message))
            h = self.handlers.get(ERROR)
            if h:
                h({"where": "agent", "msg": message.get("description") or str(message)})
            return
        payload = message.get("payload")
        if not isinstance(payload, dict) or "type" not in payload:
            self.unknown.append(message)
            return
        h = self.handlers.get(payload["type"])
        if h is None:
            self.unknown.append(payload)
            return
        h(payload)
