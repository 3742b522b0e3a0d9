-- Acknowledge a finished batch member (or batch callback) in its queue partition's slot, the sharded
-- layout's half of batch_ack.lua: store/batch_scripts.py wraps it as `filing()` ahead of
-- batch_end.lua, which writes the member's end into the partition's outbox in the same step (its
-- batch, in the home slot, counts it when the entry is moved: docs/architecture.md "Batches in the
-- sharded layout").
--
-- KEYS[1]  this process's in-progress list of the partition (with ARGV[1] = "", any key of the slot)
-- KEYS[2]  the partition's stat:processed
-- KEYS[3]  the partition's stat:processed:<today>
-- KEYS[4]  the job's orphan counter (it ran to the end: its count is moot)
-- ARGV[1]  the raw payload as fetched; "" for a job basic fetch popped (on no list)
-- Returns 1 when acknowledged now, 0 when the job was no longer in progress (recovery took it, or an
-- earlier call whose reply was lost acknowledged it), or {"wrongtype", key} (nothing changed).
local listed = ARGV[1] ~= ""
local bad = first_wrong_type({{KEYS[2], "string"}, {KEYS[3], "string"}, listed and {KEYS[1], "list"} or nil})
if bad then
  return {"wrongtype", bad}
end
if listed and redis.call("LREM", KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
count_processed(KEYS[2], KEYS[3], 1)
redis.call("DEL", KEYS[4])
return 1
