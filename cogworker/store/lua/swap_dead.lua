-- Replace one dead-set entry with another in one step: two separate commands could leave both in
-- dead, and a "retry" from two operators at once would then run the job twice.
--
-- KEYS[1]  cogworker:dead
-- ARGV[1]  the entry to replace
-- ARGV[2]  the new entry's score
-- ARGV[3]  the new entry ("" to only remove: used when an entry is taken out to be retried)
-- KEYS[2], ARGV[4], ARGV[5]  (optional: recovery completing a poison pill's burial) cogworker:deaths,
--          the death notice to push there, and how many notices that list keeps (see "Death notices
--          and on_death hooks" in docs/architecture.md): the pill's notice goes with its proper entry
-- Returns 1 when swapped, 0 when the entry was no longer there (someone else acted on it first), or
-- {"wrongtype", key} when the notice list has the wrong type (nothing changed).
if KEYS[2] and is_wrong_type(KEYS[2], "list") then
  return {"wrongtype", KEYS[2]}
end
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("ZREM", KEYS[1], ARGV[1])
if ARGV[3] ~= "" then
  redis.call("ZADD", KEYS[1], ARGV[2], ARGV[3])
end
if KEYS[2] then
  push_death_notice(KEYS[2], ARGV[4], ARGV[5])
end
return 1
