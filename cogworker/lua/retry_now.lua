-- An operator's "retry now" (`cogworker retry|scheduled|dead retry JID`, and `retry-all`): move one
-- entry from its sorted set to its queue. It is taken out and pushed in one step, and only if it was
-- still there: of two operators retrying the same entry at once exactly one enqueues it, and an entry
-- a poller (or recovery's dead-entry swap) took first is left alone.
--
-- KEYS[1]  the sorted set (cogworker:retry, cogworker:schedule or cogworker:dead)
-- KEYS[2]  the job's queue
-- KEYS[3]  cogworker:queues
-- KEYS[4]  cogworker:wake (pub/sub: wakes idle fetchers waiting on several queues)
-- ARGV[1]  the entry exactly as it is in the set
-- ARGV[2]  the payload to push (retried_at and enqueued_at set by the caller)
-- ARGV[3]  the queue name
-- Returns 1 when moved, 0 when the entry was no longer in the set (nothing pushed).
if redis.call("ZREM", KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call("LPUSH", KEYS[2], ARGV[2])
redis.call("SADD", KEYS[3], ARGV[3])
redis.call("PUBLISH", KEYS[4], ARGV[3])
return 1
