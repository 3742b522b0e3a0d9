"""Settling a job's end: what Redis is told once a run is over.

Acknowledgements, filings into retry or dead (and what is kept while Redis fails them), results,
a batch member's ack, a chain's next step, the handover of unfiled filings at shutdown, and the
per-job counts and durations reported with each status line.
"""
