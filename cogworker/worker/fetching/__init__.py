"""Fetching: how jobs get from their queues into this process.

Reliable fetch (`fetch.lua`, `BLMOVE` onto the process's in-progress list) and basic fetch (`BRPOP`,
for a Redis older than 6.2), the fallback from one to the other at run time, how many jobs a fetch
takes (the reserve of a busy process, the mix of sync and async jobs), and the one-queue wait turn an
idle job thread takes. The manager (worker/manager.py) drives them from its fetcher thread.
"""
