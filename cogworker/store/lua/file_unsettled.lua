-- File one record another process handed over at shutdown (cogworker:unsettled) into its set.
--
-- KEYS[1]  cogworker:unsettled
-- KEYS[2]  the set named by the record (already checked to be one of ours)
-- KEYS[3]  the job's orphan counter
-- ARGV[1]  the record, as it is at the head of the list
-- ARGV[2]  score
-- ARGV[3]  payload
-- KEYS[4], ARGV[4], ARGV[5]  (only when the set is cogworker:dead) cogworker:deaths, the death notice
--          to push there, and how many notices that list keeps (see "Death notices and on_death
--          hooks" in docs/architecture.md)
-- Returns 1 when filed, 2 when the head changed and the payload is in its set (filed already: by an
-- earlier call whose reply was lost, or by another process), 0 when the head changed and it isn't,
-- or {"wrongtype", key} when a key has the wrong type (nothing changed: the record stays at the head).
-- The caller releases a dead job's locks on 1 and on 2: after a lost reply, the call that filed it
-- never told anyone, and the locks would otherwise wait for their TTL (releasing twice is harmless).
-- The record is written to its set before it is taken off the list, so an error loses nothing.
local wanted = {{KEYS[1], "list"}, {KEYS[2], "zset"}}
if KEYS[4] then
  wanted[#wanted + 1] = {KEYS[4], "list"}
end
local bad = first_wrong_type(wanted)
if bad then
  return {"wrongtype", bad}
end
if redis.call("LINDEX", KEYS[1], 0) ~= ARGV[1] then
  if redis.call("ZSCORE", KEYS[2], ARGV[3]) then
    return 2
  end
  return 0
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("LPOP", KEYS[1])
redis.call("DEL", KEYS[3])
if KEYS[4] then
  push_death_notice(KEYS[4], ARGV[4], ARGV[5])
end
return 1
