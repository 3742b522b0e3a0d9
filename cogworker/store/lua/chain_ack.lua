-- Acknowledge a chain step that succeeded and push the chain's next step, in one atomic step.
--
-- KEYS[1]  the in-progress list the step was fetched onto (basic fetch, which keeps none: the
--          chain's record again, with ARGV[9] = "0")
-- KEYS[2]  <prefix>stat:processed
-- KEYS[3]  <prefix>stat:processed:<today>
-- KEYS[4]  the step's orphan counter (it ran to the end: its count is moot)
-- KEYS[5]  the chain's record, <prefix>chain:<cid> (a hash)
-- KEYS[6]  the step's result key, <prefix>result:<jid>
-- KEYS[7]  the step's result channel, <prefix>result-ready:<jid>
-- KEYS[8]  (only with a next step) the next step's queue
-- KEYS[9]  (only with a next step) <prefix>queues
-- KEYS[10] (only with a next step) the wake-up channel, <prefix>wake
-- With a group next (ARGV[10] = "group"; api/chain_group.py), instead of KEYS[8 ..] above:
-- KEYS[8]  the group's batch hash, KEYS[9] <prefix>queues, KEYS[10] <prefix>wake,
-- KEYS[11] the batch's pending set, KEYS[12] <prefix>batches, KEYS[12 + i] member i's queue
-- ARGV[1]  the raw payload as fetched
-- ARGV[2]  the step's index in the chain (0 is the first)
-- ARGV[3]  the step's result record ("": it keeps none)
-- ARGV[4]  the result's TTL in milliseconds
-- ARGV[5]  the next step's payload ("": this was the last step)
-- ARGV[6]  the next step's queue name
-- ARGV[7]  how long the chain's record is kept after this change, in seconds
-- ARGV[8]  the caller's clock (epoch seconds), recorded as the step's end
-- ARGV[9]  "1": only the run whose LREM takes the job off KEYS[1] writes; "0" (basic fetch, BRPOP:
--          the job was only in the worker's memory, at most once already): no list to check;
--          "start": nothing to acknowledge, only the next step to push (a chain whose first step is
--          a group: chain() pushes it through this script)
-- ARGV[10] "group": the next step is a group; then ARGV[11] its bid, ARGV[12] the batches listing's
--          trim score, ARGV[13] n, the number of members, then per member its jid, queue name and
--          payload, then field, value pairs for the batch's hash (its callbacks among them)
-- Returns 1 when the step was acknowledged (and its successor pushed), 0 when it was no longer in
-- progress (another run of it, or recovery, took it: nothing is written, so a step that ran twice
-- pushes its successor once), or {"wrongtype", key} (nothing changed: the caller tries again later).
--
-- Only the run whose LREM takes the job off the list pushes: that is what makes the successor's
-- push exactly-once however often the step itself runs. Every key's type is checked before the
-- removal, so the writes after it can't fail half way. A group's batch is created only when it
-- doesn't exist yet (its id is fixed when the chain is created), with every member pending and no
-- block holding it, and its members pushed in the same step: it is complete only once they all
-- ended, and created once.
local gated = ARGV[9] == "1"
local starting = ARGV[9] == "start"
local wanted = {{KEYS[2], "string"}, {KEYS[3], "string"}, {KEYS[5], "hash"}}
if gated then
  wanted[#wanted + 1] = {KEYS[1], "list"}
end
local successor = ARGV[5] ~= ""
local grouped = ARGV[10] == "group"
local members = 0
if successor then
  wanted[#wanted + 1] = {KEYS[8], "list"}
  wanted[#wanted + 1] = {KEYS[9], "set"}
elseif grouped then
  members = tonumber(ARGV[13])
  for _, want in ipairs({{KEYS[8], "hash"}, {KEYS[9], "set"}, {KEYS[11], "set"}, {KEYS[12], "zset"}}) do
    wanted[#wanted + 1] = want
  end
  for i = 1, members do
    wanted[#wanted + 1] = {KEYS[12 + i], "list"}
  end
end
local bad = first_wrong_type(wanted)
if bad then
  return {"wrongtype", bad}
end
if gated and redis.call("LREM", KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
if not starting then
  redis.call("DEL", KEYS[4])
  count_processed(KEYS[2], KEYS[3], 1)
  if ARGV[3] ~= "" then
    -- SET replaces a key of any type: nothing to check first.
    redis.call("SET", KEYS[6], ARGV[3], "PX", ARGV[4])
    redis.call("PUBLISH", KEYS[7], ARGV[3])
  end
  local index = tonumber(ARGV[2])
  local ended = "done_at:" .. index  -- not a key: a field of the chain's hash
  redis.call("HSET", KEYS[5], ended, ARGV[8], "done", index + 1)
end
if grouped then
  if redis.call("EXISTS", KEYS[8]) == 0 then
    local now = ARGV[8]
    redis.call("HSET", KEYS[8], "created_at", now, "holds", 0, "total", members, "done", 0, "failed", 0, "dead", 0)
    for i = 14 + 3 * members, #ARGV, 2 do
      redis.call("HSET", KEYS[8], ARGV[i], ARGV[i + 1])
    end
    redis.call("ZADD", KEYS[12], now, ARGV[11])
    redis.call("ZREMRANGEBYSCORE", KEYS[12], "-inf", "(" .. ARGV[12])  -- not a key: a score bound
    for i = 1, members do
      local at = 14 + 3 * (i - 1)
      redis.call("SADD", KEYS[11], ARGV[at])
      redis.call("LPUSH", KEYS[12 + i], ARGV[at + 2])
      redis.call("SADD", KEYS[9], ARGV[at + 1])
      redis.call("PUBLISH", KEYS[10], ARGV[at + 1])
    end
  end
  redis.call("HSET", KEYS[5], "state", "running")
elseif successor then
  redis.call("LPUSH", KEYS[8], ARGV[5])
  redis.call("SADD", KEYS[9], ARGV[6])
  redis.call("PUBLISH", KEYS[10], ARGV[6])
  -- A step an operator retried out of dead carries the chain on: it runs again.
  redis.call("HSET", KEYS[5], "state", "running")
else
  redis.call("HSET", KEYS[5], "state", "complete", "completed_at", ARGV[8])
end
redis.call("EXPIRE", KEYS[5], tonumber(ARGV[7]))
return 1
