"""The settings of workflows built on jobs (batches: api/batch.py). A base of cogworker's Settings,
read from COGWORKER_* variables like every other; kept here so settings.py stays one screenful of
fields per concern."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings


class WorkflowSettings(BaseSettings):
    # How long a batch's records (its hash, pending set and failures) are kept once it completed:
    # `batch_status` and the Web UI read them until then. An open batch's keys have no expiry (it
    # may wait on a retried member for weeks); its completion starts the clock.
    batch_ttl_s: Annotated[float, Field(gt=0)] = 30 * 24 * 3600.0
