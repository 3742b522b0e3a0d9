-- Move an entry that can't be enqueued (not JSON, no queue) from a sorted set to dead. Left in place
-- it would sort first, fail every poll and starve everything behind it.
--
-- KEYS[1]  the sorted set it is in
-- KEYS[2]  cogworker:dead
-- KEYS[3]  cogworker:stat:failed
-- ARGV[1]  the entry
-- ARGV[2]  its dead-set score
-- ARGV[3]  the dead entry to store (the raw text wrapped with its error)
-- Returns 1 when moved, 0 when someone else took it first.
if redis.call("ZREM", KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("INCR", KEYS[3])
return 1
