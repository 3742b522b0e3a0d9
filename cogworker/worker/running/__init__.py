"""Running a job: from a fetched payload to the end of its run, on a job thread or the event loop.

The processor (decode, resolve, the server middleware chain, then the settle), its async twin that
runs an `async def` job on the event loop from start to settle (async_process.py), the bridge threads
its sync middleware runs on, time limits and the stuck jobs they find, cancellation, raising an
exception in another thread, and the thread that runs on_death hooks.
"""
