"""Recovering jobs held by a process that is gone, and this process's own after a lost reply.

Orphan recovery and poison pills (`requeue.lua`, `swap_dead.lua`) for the in-progress lists of dead
processes, and the reconcile that puts back on their queue the jobs on this process's own list that
it no longer holds.
"""
