"""One worker process: what `cogworker run` and every swarm child run (imports the job API and store).

The modules here are the process itself: `main` (signals, the app's import), the `launcher` that
starts and stops its parts in order, the `manager` (the fetcher thread and the job threads), its
identity, command pipe and events to the supervisor. The rooms below hold the parts: `fetching/`,
`running/`, `settling/`, `recovering/` and `loops/`.
"""
