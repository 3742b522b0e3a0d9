"""Integrations with other libraries, each behind its own optional extra (never imported by the core)."""
