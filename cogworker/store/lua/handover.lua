-- At shutdown, hand a settle this process could not file (Redis was failing) to Redis for another
-- process to file, and take its job off the in-progress list in the same step, so the job is not
-- both requeued and filed.
--
-- KEYS[1]  cogworker:unsettled
-- KEYS[2]  this process's in-progress list
-- KEYS[3]  the handover's mark: cogworker:handed-over:<SHA-1 of the record>
-- ARGV[1]  the record (JSON: set, score, payload)
-- ARGV[2]  the raw payload as fetched; "" for a job basic fetch popped (on no list: handed over as is)
-- ARGV[3]  how long the mark is kept, in seconds
-- Returns 1 when handed over; 2 when it already was (the mark is there: an earlier call whose reply
-- was lost, so nothing is written twice); 0 when the job is no longer on the list (nothing handed
-- over: see below); or {"wrongtype", key} when a key has the wrong type (nothing changed: the job
-- stays in progress and is requeued with the rest of the list).
-- The record is written before the job is taken off the list, so an error loses nothing.
local bad = first_wrong_type({{KEYS[1], "list"}, {KEYS[2], "list"}, {KEYS[3], "string"}})
if bad then
  return {"wrongtype", bad}
end
-- The mark is written with the handover, in this step: whoever sends the same record again (the
-- caller retrying a handover whose reply it never read) learns that it happened, where the list
-- alone could not tell it from a requeue by another process.
if redis.call("EXISTS", KEYS[3]) == 1 then
  return 2
end
-- Not on the list: orphan recovery requeued it while this process was silent past the orphan
-- threshold (declared dead), and another process runs that copy. Handed over, it would be filed in
-- retry too and run a third time. (Same rule as settle.lua's LREM check.)
local listed = ARGV[2] ~= ""
if listed and not redis.call("LPOS", KEYS[2], ARGV[2]) then
  return 0
end
redis.call("RPUSH", KEYS[1], ARGV[1])
if listed then
  redis.call("LREM", KEYS[2], -1, ARGV[2])
end
redis.call("SET", KEYS[3], "1", "EX", ARGV[3])
return 1
