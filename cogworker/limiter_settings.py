"""The settings of rate limiters (api/limiter.py, api/limit_jobs.py). A base of cogworker's Settings,
which reads them from COGWORKER_* variables like every other; kept here so settings.py stays within
its size."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings


class LimiterSettings(BaseSettings):
    # How long in all a job may be put back in the schedule set by a full limiter before OverLimit
    # is its failure (a limiter's own max_wait_s= overrides it).
    limiter_max_wait_s: Annotated[float, Field(gt=0, le=10 * 365 * 24 * 3600)] = 3600.0
