-- The home slot's part of a chain step's outbox entry (sharded layout, worker/settling/chain_sharded.py):
-- the step's result and the chain's progress, as chain_ack.lua writes them in the one-slot layout. Run
-- by whichever process moves the entry, maybe more than once (a mover that died before its HDEL, a
-- lost reply): every write is idempotent.
--
-- KEYS[1]  the chain's record, <prefix>chain:<cid> (a hash)
-- KEYS[2]  the step's result key, <prefix>result:<jid>
-- KEYS[3]  the step's result channel, <prefix>result-ready:<jid>
-- ARGV[1]  the step's index in the chain
-- ARGV[2]  when the step ended (epoch seconds, the acknowledging worker's clock)
-- ARGV[3]  the step's result record ("": it keeps none)
-- ARGV[4]  the result's TTL in milliseconds
-- ARGV[5]  how long the chain's record is kept after this change, in seconds
-- ARGV[6]  "1": this was the chain's last step
-- Returns 1, or {"wrongtype", key} (nothing changed: the entry stays for a later move).
local bad = first_wrong_type({{KEYS[1], "hash"}})
if bad then
  return {"wrongtype", bad}
end
if ARGV[3] ~= "" then
  -- The same record each time; a waiter subscribed between two runs hears it once more, harmlessly.
  redis.call("SET", KEYS[2], ARGV[3], "PX", ARGV[4])
  redis.call("PUBLISH", KEYS[3], ARGV[3])
end
local index = tonumber(ARGV[1])
redis.call("HSETNX", KEYS[1], "done_at:" .. index, ARGV[2])  -- not a key: a field of the hash
-- `done` only grows: a late second run for an earlier step can't move it back.
local done = tonumber(redis.call("HGET", KEYS[1], "done") or "0") or 0
if done < index + 1 then
  redis.call("HSET", KEYS[1], "done", index + 1)
end
if ARGV[6] == "1" then
  redis.call("HSET", KEYS[1], "state", "complete")
  redis.call("HSETNX", KEYS[1], "completed_at", ARGV[2])
else
  -- A step an operator retried out of dead carries the chain on (as in chain_ack.lua), but a second
  -- run of this step's entry must not undo the death of a later step already recorded.
  local dead_step = tonumber(redis.call("HGET", KEYS[1], "dead_step") or "-1") or -1
  if redis.call("HGET", KEYS[1], "state") ~= "dead" or dead_step <= index then
    redis.call("HSET", KEYS[1], "state", "running")
  end
end
redis.call("EXPIRE", KEYS[1], tonumber(ARGV[5]))
return 1
