"""One worker process: what `cogworker run` and every swarm child run (imports the job API and store)."""
