-- Acknowledge a finished batch member (or batch callback) and record its end in its batch, in one
-- atomic step (after batch_lib.lua, which store/batch_scripts.py puts in front of this text).
--
-- KEYS[1]  this process's in-progress list (with ARGV[1] = "", any key of the same slot: unread)
-- KEYS[2]  <prefix>stat:processed
-- KEYS[3]  <prefix>stat:processed:<today>
-- KEYS[4]  the job's orphan counter (it ran to the end: its count is moot)
-- KEYS[5 ..], ARGV[2 ..]  the batch layout of batch_lib.lua, with kb = 5 and ab = 2 (outcome "ok",
--          or "failed" for a member that ended without running: expired or cancelled)
-- ARGV[1]  the raw payload as fetched; "" for a job basic fetch popped (BRPOP): on no list, counted
-- Returns 1 when acknowledged, 0 when the job was no longer in progress (recovery took it: the copy
-- that runs now records its end), or {"wrongtype", key} (nothing changed: retried later).
--
-- Plain jobs are acknowledged in fetch.lua, batched; a batch member comes here instead, so the ack
-- and the member's count can't be separated by a crash.
local listed = ARGV[1] ~= ""
local bad = first_wrong_type({{KEYS[2], "string"}, {KEYS[3], "string"}, listed and {KEYS[1], "list"} or nil})
if bad then
  return {"wrongtype", bad}
end
local wrong = batch_check(5, 2)
if wrong then
  return wrong
end
if listed and redis.call("LREM", KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
count_processed(KEYS[2], KEYS[3], 1)
redis.call("DEL", KEYS[4])
batch_run(5, 2)
return 1
