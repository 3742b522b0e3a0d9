"""The `cogworker` command: `run` (one worker process) and the operations verbs."""
