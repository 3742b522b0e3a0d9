-- Write one batch of push_bulk's jobs: all of them, or -- when a key has the wrong type -- none.
-- Pipelined commands would write the jobs of the other queues and fail only those of the bad one,
-- and the caller, told the batch failed, would push the written ones again.
--
-- KEYS[1]      cogworker:queues
-- KEYS[2]      cogworker:wake (pub/sub: idle fetchers reading several queues wait on it)
-- KEYS[3]      cogworker:schedule
-- KEYS[4..]    the queue keys, one per queue group in ARGV
-- ARGV[1]      number of queue groups (n)
-- then for each group: the queue name, the number of payloads, the payloads
-- then: the number of scheduled jobs, and as many score, payload pairs
-- Returns 1 when written, or {"wrongtype", key} when a key has the wrong type (nothing written).
local groups = tonumber(ARGV[1])
local wanted = {{KEYS[1], "set"}, {KEYS[3], "zset"}}
for k = 4, 3 + groups do
  wanted[#wanted + 1] = {KEYS[k], "list"}
end
for _, want in ipairs(wanted) do
  local kind = redis.call("TYPE", want[1])["ok"]
  if kind ~= want[2] and kind ~= "none" then
    return {"wrongtype", want[1]}
  end
end
local at = 2
for k = 4, 3 + groups do
  local name, count = ARGV[at], tonumber(ARGV[at + 1])
  redis.call("LPUSH", KEYS[k], unpack(ARGV, at + 2, at + 1 + count))
  redis.call("SADD", KEYS[1], name)
  redis.call("PUBLISH", KEYS[2], name)
  at = at + 2 + count
end
local scheduled = tonumber(ARGV[at])
if scheduled > 0 then
  redis.call("ZADD", KEYS[3], unpack(ARGV, at + 1, at + 2 * scheduled))
end
return 1
