"""The `cogworker` management command (cogworker.py)."""
