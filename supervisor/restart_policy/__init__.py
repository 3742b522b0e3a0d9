"""When and why children are started again: keeping slots filled (respawns.py) with a delay that
grows while a slot keeps crashing (backoff.py), the order a restart replaces slots in
(restart_plan.py), children over the memory limit (memory_watch.py), and a dead child's jobs asked
back before its slot is forked again (requeue_requests.py).
"""
