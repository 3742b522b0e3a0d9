-- Acknowledge a chain step that succeeded, in the sharded layout: in its queue partition's slot, with
-- the outbox entry that carries the rest (worker/settling/chain_sharded.py). chain_ack.lua's gate, in
-- the slot where the step's in-progress list is; the chain's record, the result and the next step's
-- partition are in other slots, so what changes there is written down as one entry of this slot's
-- outbox (store/outbox.py), moved by the caller at once or by any worker's sweep.
--
-- KEYS[1]  the partition's in-progress list the step was fetched onto (the sharded layout has no
--          basic fetch: there is always one)
-- KEYS[2]  the partition's stat:processed
-- KEYS[3]  the partition's stat:processed:<today>
-- KEYS[4]  the step's orphan counter in the partition (it ran to the end: its count is moot)
-- KEYS[5]  the partition's outbox (a hash: entry id -> JSON)
-- ARGV[1]  the raw payload as fetched
-- ARGV[2]  the entry's id, chain:<cid>:<index>
-- ARGV[3]  the entry's JSON (outbox.encode: the result, the record's update, the next step's push)
-- Returns 1 when the step was acknowledged and the entry written, 0 when it was no longer in progress
-- (another run of it, or recovery, took it: nothing is written, so a step that ran twice leads to one
-- entry, and its successor is pushed once), or {"wrongtype", key} (nothing changed).
local bad = first_wrong_type({{KEYS[1], "list"}, {KEYS[2], "string"}, {KEYS[3], "string"}, {KEYS[5], "hash"}})
if bad then
  return {"wrongtype", bad}
end
-- Only the run whose LREM takes the job off the list writes.
if redis.call("LREM", KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call("DEL", KEYS[4])
count_processed(KEYS[2], KEYS[3], 1)
-- The id is the step's: an entry written again (the same payload pushed and run again by hand) replaces
-- the first, never adds one.
redis.call("HSET", KEYS[5], ARGV[2], ARGV[3])
return 1
