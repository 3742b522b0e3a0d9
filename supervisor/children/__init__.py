"""The supervisor's children, the workers: one child's state (child.py), the roster of live children
and each slot's current one (roster.py), their processes, pipes and signals (processes.py), what
their lines mean (messages.py), their deadlines (deadlines.py), reaping them (reaper.py), replacing
running ones (replacements.py), and asking for new ones (spawner.py; late_spawns.py stops a worker
nobody waits for any more). env.py and exit.py are how every forked process starts clean and ends.

The fork server forks the children (forkserver/, asked through forkserver_client/); when a slot is
filled again is restart_policy/'s call.
"""
