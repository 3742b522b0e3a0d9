"""Per-class and per-queue metrics of a worker process, written to Redis (store/metrics_layout.py).

The recorder adds each job's end and each pickup to in-memory counts per minute under one lock; the
flusher writes them every COGWORKER_METRICS_FLUSH_S in one script call, so a job adds no round trip.
"""
