"""Following the programs a spawned target starts (see native/runtime/follow/follow.c).

The controller listens on a unix socket in a private 0700 directory; each program started
with libsigmatrace_follow.so preloaded connects, says `hello <pid>` and waits until it is told
to go on.  The server hands each hello to the controller's thread as a `Hello`; the controller
attaches, then calls `Hello.release()`.
"""
from __future__ import annotations

import os
import queue
import shutil
import socket
import struct
import tempfile
import threading
from dataclasses import dataclass

from .. import paths

ENV_SOCKET = "SIGMATRACE_FOLLOW"
ENV_TIMEOUT = "SIGMATRACE_FOLLOW_TIMEOUT"


@dataclass
class Hello:
    pid: int
    conn: socket.socket

    def release(self) -> None:
        """Let the waiting program go on (whatever happened to tracing it)."""
        try:
            self.conn.sendall(b"go\n")
        except OSError:
            pass
        finally:
            self.conn.close()


class FollowServer:
    """Accepts hellos on a private unix socket and puts them on `events` as ("hello", Hello)."""

    def __init__(self, events: queue.Queue):
        self.events = events
        self.dir = tempfile.mkdtemp(prefix="sigmatrace-")  # 0700 by construction
        self.path = os.path.join(self.dir, "follow.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self.sock.listen(64)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="sigmatrace-follow", daemon=True)
        self._thread.start()

    def env(self, base: dict[str, str], timeout_s: int = 60) -> dict[str, str]:
        """`base` plus what makes a started program (and its descendants) say hello."""
        env = dict(base)
        lib = str(paths.native("libsigmatrace_follow.so"))
        pre = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p and p != lib]
        env["LD_PRELOAD"] = " ".join([lib] + pre)
        env[ENV_SOCKET] = self.path
        env[ENV_TIMEOUT] = str(timeout_s)
        return env

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(5)
                line = b""
                while not line.endswith(b"\n") and len(line) < 64:
                    chunk = conn.recv(64)
                    if not chunk:
                        break
                    line += chunk
                conn.settimeout(None)
                word, _, pid_text = line.decode(errors="replace").strip().partition(" ")
                # the kernel's word on who connected, not the message's
                cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                peer_pid, _uid, _gid = struct.unpack("3i", cred)
                if word != "hello" or not pid_text.isdigit() or int(pid_text) != peer_pid:
                    conn.close()
                    continue
                self.events.put(("hello", Hello(peer_pid, conn)))
            except OSError:
                conn.close()

    def close(self) -> None:
        if self._stop:
            return
        self._stop = True
        shutil.rmtree(self.dir, ignore_errors=True)  # no new connections from here on
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the server thread
        except OSError:
            pass
        self.sock.close()
        self._thread.join(timeout=5)
        # programs still waiting: the events not taken are released here
        while True:
            try:
                kind, item = self.events.get_nowait()
            except queue.Empty:
                break
            if kind == "hello":
                item.release()
