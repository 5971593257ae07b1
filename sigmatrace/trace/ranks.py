"""Which rank of a parallel job a process is, from its launcher's environment: one list, used to
expand --out's {rank}, to record the rank in meta.json and to recover it when a trace is read."""
from __future__ import annotations

from collections.abc import Mapping

# Rank variables of common launchers (torchrun, Open MPI, MPICH/PMI, Slurm, PMIx), in the order
# they are trusted; LOCAL_RANK last, for launchers that set nothing else.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PMIX_RANK", "LOCAL_RANK")

# What meta.json keeps of a process's environment: the rank variables, the job's size, its GPUs.
KEPT_VARIABLES = RANK_VARIABLES + ("WORLD_SIZE", "CUDA_VISIBLE_DEVICES")


def rank_from_env(env: Mapping[str, str]) -> int | None:
    """The rank the first set rank variable gives, or None."""
    for name in RANK_VARIABLES:
        v = str(env.get(name, "")).strip()
        if v.isascii() and v.isdigit():
            return int(v)
    return None


def kept_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: env[k] for k in KEPT_VARIABLES if k in env}
