-- The tail of a batch member's (or batch callback's) end in its queue partition's slot, in the
-- sharded layout: store/batch_scripts.py builds the script from the ending script (member_ack.lua,
-- settle.lua, file_unsettled.lua, or swap_dead.lua for a poison pill's burial) wrapped as
-- `filing()`, then `local KO, AO = ...` (where this tail's keys and arguments start), then this text.
--
-- KEYS[1 ..]  the ending script's own keys; then
-- KEYS[KO]    the partition's outbox (hash: entry id -> JSON)
-- ARGV[AO]    the entry's id, `batch:<bid>:<jid>:<outcome>` (written twice, it is overwritten)
-- ARGV[AO+1]  the entry's JSON (store/outbox.py encode, kind "batch_end": the member's batches, its
--             jid, outcome and error)
-- Returns what the ending script returns. The entry is written only when the job moved now (1, or 3
-- for settle.lua's filing of a job whose in-progress entry Redis lost): a job recovery took is ended
-- by the copy that runs now, and an end already made (a resend after a lost reply: 0 or 2) wrote its
-- entry with it. The member is counted in its batch when the entry is moved (batch_apply.lua).
if is_wrong_type(KEYS[KO], "hash") then
  return {"wrongtype", KEYS[KO]}
end
local ended = filing()
if ended == 1 or ended == 3 then
  redis.call("HSET", KEYS[KO], ARGV[AO], ARGV[AO + 1])
end
return ended
