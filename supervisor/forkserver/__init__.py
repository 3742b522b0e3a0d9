"""The fork server: the process the swarm's workers are forked from (started as
`python -m supervisor.forkserver.main`, or forked from the supervisor for a swarm's first one:
supervisor/forkserver_client/first_forkserver.py). main.py turns the collector off for boot.py,
which loads the settings and the code; server.py answers the supervisor's requests, fork.py forks a
worker, redis_requeue.py puts a dead child's jobs back. The supervisor's side of the conversation
is forkserver_client/.

Nothing in the supervisor imports this package's modules (forkserver_client/first_forkserver.py
imports main.py in the forked child only): it holds the Redis client, pydantic and the
app, which the supervisor must not load (it stays small). Only the title below is shared, for `ps`
and for tests that tell the fork server from the workers.
"""

TITLE = "cogworker-swarm fork server"  # its process title, as `ps` shows it
