"""The swarm: one supervisor process that keeps cogworker worker children alive, watches and
replaces them. A fork server it starts (template.py) forks them; they are the supervisor's children.

Note: supervisord's PyPI package is also imported as `supervisor`; cogworker-swarm takes its place,
and the two can't share one virtualenv.
"""
