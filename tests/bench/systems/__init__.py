"""The systems a run can measure, by name, in the order they run. Each is imported only when chosen,
so a system that can't be imported fails its own row and not the run."""

from __future__ import annotations

import importlib

from systems.base import System

NAMES = ("cogworker", "sidekiq-yjit", "sidekiq", "dramatiq", "rq", "celery", "arq", "saq")

_CLASSES = {
    "cogworker": ("systems.cogworker_system", "Cogworker"),
    "sidekiq-yjit": ("systems.sidekiq_system", "SidekiqYjit"),
    "sidekiq": ("systems.sidekiq_system", "Sidekiq"),
    "dramatiq": ("systems.dramatiq_system", "Dramatiq"),
    "rq": ("systems.rq_system", "Rq"),
    "celery": ("systems.celery_system", "Celery"),
    "arq": ("systems.arq_system", "Arq"),
    "saq": ("systems.saq_system", "Saq"),
}


def load(name: str, redis_url: str) -> System:
    module_name, class_name = _CLASSES[name]
    cls: type[System] = getattr(importlib.import_module(module_name), class_name)
    return cls(redis_url)
