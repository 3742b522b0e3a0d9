"""Running a job: from a fetched payload to the end of its run, on a job thread or the event loop.

The processor (decode, resolve, the server middleware chain, then the settle), the event loop and
the carrier threads of `async def` jobs, time limits and the stuck jobs they find, cancellation,
raising an exception in another thread, and the thread that runs on_death hooks.
"""
