"""The job API: what application code imports to define, push and test jobs (no worker code)."""
