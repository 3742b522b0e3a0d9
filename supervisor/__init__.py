"""The swarm: one supervisor process that forks, watches and replaces cogworker worker children.

Note: supervisord's PyPI package is also imported as `supervisor`; cogworker-swarm takes its place,
and the two can't share one virtualenv.
"""
