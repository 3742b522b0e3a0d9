"""What plugs into the supervisor's loop: the hook points (hooks.py), systemd's notify protocol
(notify.py, systemd.py) and Prometheus metrics (metrics*.py). Nothing here may block the loop."""
