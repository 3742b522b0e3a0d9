-- Move an entry from a sorted set (schedule or retry) to dead. The poller buries an entry that
-- can't be enqueued (not JSON, no queue): left in place it would sort first, fail every poll and
-- starve everything behind it. The ops CLI's "kill" moves one there on an operator's word.
--
-- KEYS[1]  the sorted set it is in
-- KEYS[2]  cogworker:dead
-- KEYS[3]  cogworker:stat:failed
-- ARGV[1]  the entry
-- ARGV[2]  its dead-set score
-- ARGV[3]  the dead entry to store (the raw text wrapped with its error, or the payload killed)
-- ARGV[4]  "1" to count a failure, "0" not to (default "1")
-- ARGV[5]  dead-set cap: most entries kept (0 or absent = no cap)
-- ARGV[6]  dead-set cap: entries older than this score are trimmed
-- KEYS[4], ARGV[7], ARGV[8]  (optional) cogworker:deaths, the death notice to push there, and how
--          many notices that list keeps (see "Death notices and on_death hooks" in
--          docs/architecture.md)
-- Returns 1 when moved, 0 when someone else took it first, or {"wrongtype", key} when a key has
-- the wrong type (nothing changed).
--
-- Types are checked first and the dead entry is written before the entry is taken out: Redis keeps
-- what a script wrote before an error, so a removal followed by a failed write would lose the job.
local wanted = {{KEYS[1], "zset"}, {KEYS[2], "zset"}, {KEYS[3], "string"}}
if KEYS[4] then
  wanted[#wanted + 1] = {KEYS[4], "list"}
end
local bad = first_wrong_type(wanted)
if bad then
  return {"wrongtype", bad}
end
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("ZREM", KEYS[1], ARGV[1])
if ARGV[4] ~= "0" then
  redis.call("INCR", KEYS[3])
end
trim_dead(KEYS[2], ARGV[5], ARGV[6])
if KEYS[4] then
  push_death_notice(KEYS[4], ARGV[7], ARGV[8])
end
return 1
