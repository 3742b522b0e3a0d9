"""Typing checks: what mypy and pyright must accept and refuse of the job API (`make lint`)."""
