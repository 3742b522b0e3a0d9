-- At shutdown, hand a settle this process could not file (Redis was failing) to Redis for another
-- process to file, and take its job off the in-progress list in the same step, so the job is not
-- both requeued and filed.
--
-- KEYS[1]  cogworker:unsettled
-- KEYS[2]  this process's in-progress list
-- ARGV[1]  the record (JSON: set, score, payload)
-- ARGV[2]  the raw payload as fetched
-- Returns 1.
redis.call("RPUSH", KEYS[1], ARGV[1])
redis.call("LREM", KEYS[2], -1, ARGV[2])
return 1
