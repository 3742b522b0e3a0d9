-- Put one fetched-but-unstarted job back at the end of its queue that is popped next.
--
-- KEYS[1]  the in-progress list
-- KEYS[2]  the job's queue
-- ARGV[1]  the raw payload
-- Returns 1 when given back, 0 when it was no longer in progress (already requeued by recovery), or
-- {"wrongtype", key} when a key has the wrong type (nothing changed: the job stays in progress,
-- where the owner's requeue at stop or recovery finds it).
--
-- Types are checked before the job is taken off the list: Redis keeps what a script did before an
-- error, so a removal followed by a failed push would lose the job.
local bad = first_wrong_type({{KEYS[1], "list"}, {KEYS[2], "list"}})
if bad then
  return {"wrongtype", bad}
end
if redis.call("LREM", KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call("RPUSH", KEYS[2], ARGV[1])
return 1
