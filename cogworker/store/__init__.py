"""The Redis plumbing every process shares: key names, Lua scripts, connections, locks, outages."""
