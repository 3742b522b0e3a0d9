-- Put one fetched-but-unstarted job back at the end of its queue that is popped next.
--
-- KEYS[1]  the in-progress list
-- KEYS[2]  the job's queue
-- ARGV[1]  the raw payload
-- Returns 1 when given back, 0 when it was no longer in progress (already requeued by recovery).
if redis.call("LREM", KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call("RPUSH", KEYS[2], ARGV[1])
return 1
