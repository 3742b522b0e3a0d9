"""The swarm: one supervisor process that keeps cogworker worker children alive, watches and
replaces them. A fork server it starts forks them; they are the supervisor's children.

The top-level modules are the supervisor process's loop: main.py starts it, swarm.py is the loop,
beside its signals, settings, process calls and publishing. Its parts are in rooms: children/ (the
workers' state, processes, pipes, deadlines, exits and replacements), restart_policy/ (when and why
a slot gets a new child) and forkserver_client/ (the supervisor's side of its fork servers). What
runs in the fork server itself is in forkserver/, the formats the processes exchange in wire/, and
systemd notify and Prometheus metrics in integrations/. docs/architecture.md walks through all of it.

Note: supervisord's PyPI package is also imported as `supervisor`; cogworker-swarm takes its place,
and the two can't share one virtualenv.
"""
