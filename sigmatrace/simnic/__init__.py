"""Driving the emulated ConnectX NIC ("simnic") from Python.

A program runs on the emulated NIC when it finds our libibverbs.so.1 / libmlx5.so.1 first:

    from sigmatrace.simnic import environment
    env = {**os.environ, **environment(devices=2, fabric="t1")}
    subprocess.run(["ibv_devinfo"], env=env)

Processes that use the same fabric name can connect their queue pairs; distinct names never
meet, which keeps concurrent tests apart.  `sysview` shows the HCAs in /sys and /dev to one
program (what `sigmatrace simnic run` does).  See docs/simnic.md.
"""
from .env import cudastub_dir, environment, library_dir
from .fabric import FabricPort, cleanup, fabric_ports, objects, unique_fabric

__all__ = [
    "FabricPort",
    "cleanup",
    "cudastub_dir",
    "environment",
    "fabric_ports",
    "library_dir",
    "objects",
    "unique_fabric",
]
