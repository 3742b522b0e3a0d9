"""Integrations with other libraries, each behind its own optional extra (cogworker[django], ...)."""
