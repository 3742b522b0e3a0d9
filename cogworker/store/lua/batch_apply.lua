-- Count a batch member's end in its batch, in the home slot (sharded layout), after batch_lib.lua:
-- the apply step of a `batch_end` outbox entry (worker/settling/batch_moves.py), or of a block's
-- close (`close` below). Idempotent like every outbox step: the member is counted by SREM (once per
-- jid), and the decision is batch_lib.lua's HSETNX; a second run changes nothing.
--
-- KEYS[1]  <prefix>{home}:outbox (hash): the decided batch's callbacks are written here as entries
-- KEYS[2 ..], ARGV[1 ..]  the batch layout of batch_lib.lua, with kb = 2 and ab = 1 (no callback
--          queue keys: callbacks go through the outbox)
-- Returns the ids of the callback entries written now (empty: nothing decided), or {"wrongtype", key}.
if is_wrong_type(KEYS[1], "hash") then
  return {"wrongtype", KEYS[1]}
end
local wrong = batch_check(2, 1)
if wrong then
  return wrong
end
batch_mode.outbox = KEYS[1]
batch_run(2, 1)
return batch_mode.fired
