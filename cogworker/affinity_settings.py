"""COGWORKER_CPU_AFFINITY: whether the swarm pins each worker to one CPU (supervisor/forkserver/
cpu_affinity.py). A base of cogworker's Settings, which reads it from the environment like every other;
kept here so settings.py stays one screenful of fields per concern."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings


class AffinitySettings(BaseSettings):
    # `none`: the kernel places every worker's threads on any CPU the swarm may use. `spread`: slot N's
    # worker (and every thread it starts) runs on the Nth of those CPUs, wrapping round. A CPython
    # process runs Python on one CPU at a time; spread across CPUs, its threads hand the GIL over from
    # core to core at every socket call. Pinned, short Redis-bound jobs ran ~40 % faster (RUNBOOK
    # "Pinning workers to CPUs"), but threads that run outside the GIL (numpy, torch, compression)
    # share that one CPU too, so it is the operator's choice, not the default.
    cpu_affinity: Literal["none", "spread"] = "none"

    @field_validator("cpu_affinity")
    @classmethod
    def _can_pin(cls, value: str) -> str:
        if value != "none" and not hasattr(os, "sched_setaffinity"):
            raise ValueError("this platform can't pin a process to a CPU (no sched_setaffinity); use none")
        return value
