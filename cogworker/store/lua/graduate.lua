-- Move one entry from a sorted set (schedule, retry or dead) to its queue: claimed and pushed in one
-- step, so any number of pollers -- or two operators retrying the same dead job at once -- can race
-- and the entry is enqueued exactly once. Used by the poller for due entries and by the ops CLI's
-- "retry now".
--
-- KEYS[1]  the sorted set
-- KEYS[2]  the job's queue
-- KEYS[3]  cogworker:queues
-- KEYS[4]  cogworker:wake (pub/sub: idle fetchers reading several queues wait on it)
-- ARGV[1]  the entry as it is in the set
-- ARGV[2]  the payload to push (the entry with enqueued_at set)
-- ARGV[3]  the queue name
-- Returns 1 when moved, 0 when someone else took it first (nothing pushed), or {"wrongtype", key}
-- when a key has the wrong type (nothing changed: the entry stays in its set).
--
-- Types are checked before anything is written, and the job is pushed before the entry is taken
-- out: Redis keeps what a script wrote before an error, so a removal followed by a failed push
-- would lose the job.
local bad = first_wrong_type({{KEYS[1], "zset"}, {KEYS[2], "list"}, {KEYS[3], "set"}})
if bad then
  return {"wrongtype", bad}
end
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("LPUSH", KEYS[2], ARGV[2])
redis.call("ZREM", KEYS[1], ARGV[1])
redis.call("SADD", KEYS[3], ARGV[3])
redis.call("PUBLISH", KEYS[4], ARGV[3])
return 1
