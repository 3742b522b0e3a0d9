-- The poller's move of a batch of due entries from one sorted set (schedule or retry) to their
-- queues: each entry claimed and pushed in one step, as graduate.lua does for one, so any number of
-- pollers can race and an entry is enqueued exactly once. One call per batch, and one LPUSH, SADD and
-- PUBLISH per queue in it, instead of a script with all three per entry: a due job cost 9 Redis
-- commands, now about 3 (the scheduled-sets curve, issue 38).
--
-- KEYS[1]        the sorted set
-- KEYS[2]        cogworker:queues
-- KEYS[3]        cogworker:wake (pub/sub: idle fetchers reading several queues wait on it)
-- KEYS[4 .. 3+q] the queues the entries go to
-- ARGV[1 .. q]   each queue's name, in KEYS' order
-- then, per entry: the entry as it is in the set, the payload to push (the entry with enqueued_at
-- set), and the index (1-based) of its queue among KEYS[4 ..]
-- Returns {moved, <keys of the wrong type>...}: moved counts the entries this call pushed (an entry
-- someone else took first is skipped). The set or the registry of the wrong type moves nothing; a
-- queue of the wrong type keeps its own entries in the set, and the others move.
--
-- Types are checked before anything is written, and the jobs are pushed before their entries are
-- taken out: Redis keeps what a script wrote before an error, so a removal followed by a failed push
-- would lose the jobs.
local nqueues = #KEYS - 3
local bad = first_wrong_type({{KEYS[1], "zset"}, {KEYS[2], "set"}})
if bad then
  return {0, bad}
end
local reply = {0}
local wrong = {}
for q = 1, nqueues do
  if is_wrong_type(KEYS[3 + q], "list") then
    wrong[q] = true
    reply[#reply + 1] = KEYS[3 + q]
  end
end
local pushes = {}  -- queue index -> payloads, in the entries' order
local taken = {}
for i = nqueues + 1, #ARGV, 3 do
  local raw, q = ARGV[i], tonumber(ARGV[i + 2])
  -- Taken already (by another poller, or an earlier copy in this batch), or for a queue we can't write.
  if not wrong[q] and not taken[raw] and redis.call("ZSCORE", KEYS[1], raw) then
    taken[raw] = true
    pushes[q] = pushes[q] or {}
    table.insert(pushes[q], ARGV[i + 1])
  end
end
local removed = {}
for q = 1, nqueues do
  local payloads = pushes[q]
  if payloads then
    redis.call("LPUSH", KEYS[3 + q], unpack(payloads))
    redis.call("SADD", KEYS[2], ARGV[q])
    redis.call("PUBLISH", KEYS[3], ARGV[q])
    reply[1] = reply[1] + #payloads
  end
end
for raw in pairs(taken) do
  removed[#removed + 1] = raw
end
if #removed > 0 then
  redis.call("ZREM", KEYS[1], unpack(removed))
end
return reply
