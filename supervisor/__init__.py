"""The swarm: one supervisor process that keeps cogworker worker children alive, watches and
replaces them. A fork server it starts forks them; they are the supervisor's children.

The top-level modules run in the supervisor process (main.py starts it, swarm.py is its loop). What
runs in the fork server is in forkserver/, the formats the processes exchange in wire/, and systemd
notify and Prometheus metrics in integrations/. docs/architecture.md walks through all of it.

Note: supervisord's PyPI package is also imported as `supervisor`; cogworker-swarm takes its place,
and the two can't share one virtualenv.
"""
