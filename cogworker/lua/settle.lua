-- File a finished-with-failure job into a sorted set and take it off the in-progress list, atomically.
--
-- KEYS[1]  the in-progress list it was fetched onto
-- KEYS[2]  the set to file it in (cogworker:retry, cogworker:dead or cogworker:schedule)
-- KEYS[3]  cogworker:stat:failed, or the same key as KEYS[2] with ARGV[4] = "0" (nothing to count)
-- KEYS[4]  cogworker:stat:failed:<today>
-- KEYS[5]  the job's orphan counter (it ran to the end: its count is moot)
-- ARGV[1]  the raw payload as fetched
-- ARGV[2]  score in the set
-- ARGV[3]  the payload to file (with its error, retry count, ...)
-- ARGV[4]  "1" to count a failure, "0" not to
-- ARGV[5]  dead-set cap: most entries kept (0 = no cap)
-- ARGV[6]  dead-set cap: entries older than this score are trimmed
-- Returns 1 when filed, 0 when the job was no longer in progress (recovery took it: nothing filed,
-- so the job is not both requeued and filed).
if redis.call("LREM", KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
if ARGV[4] == "1" then
  redis.call("INCR", KEYS[3])
  redis.call("INCR", KEYS[4])
  redis.call("EXPIRE", KEYS[4], 60 * 60 * 24 * 365)
end
redis.call("DEL", KEYS[5])
local cap = tonumber(ARGV[5])
if cap and cap > 0 then
  redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[6])
  redis.call("ZREMRANGEBYRANK", KEYS[2], 0, -cap - 1)
end
return 1
