"""For the fork-hygiene test: a job that runs a program the way careless job code does (os.system,
or subprocess with close_fds=False) and reports which files that program was handed."""

from __future__ import annotations

import os
import subprocess

import redis

from cogworker import job


@job
def inherited_fds(tag: str) -> None:
    listing = subprocess.run(
        ["sh", "-c", 'for fd in /proc/$$/fd/*; do readlink "$fd" || true; done'],
        close_fds=False,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)
    client.rpush("test:exec_fds", f"{tag} {os.getpid()} {' '.join(listing)}")
