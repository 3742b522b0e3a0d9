"""The supervisor's side of its fork servers: starting them (first_forkserver.py for a swarm's
first one, forked from the supervisor), one fork server as the supervisor sees it (handle.py), their
lifecycle (lifecycle.py) and the requests sent to them with their answers (keeper.py, the spawner
the swarm uses).

This runs in the supervisor process. The fork server process's own code is forkserver/, which
nothing here imports (first_forkserver.py imports it in the forked fork server only).
"""
