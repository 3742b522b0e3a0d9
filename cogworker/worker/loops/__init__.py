"""The periodic loops of a worker process, on threads of their own beside the job threads.

The heartbeat (presence, running jobs, remote commands), the poller (due scheduled and retry jobs,
orphans, unsettled filings, the key guard) and the ticker the poller runs for periodic jobs.
"""
