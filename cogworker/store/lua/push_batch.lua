-- Write pushed jobs (one perform_async, or a batch of push_bulk's): all of them, or -- when a key
-- they are written to has the wrong type -- none. Pipelined commands would write the jobs of the
-- other queues and fail only those of the bad one, and the caller, told the push failed, would push
-- the written ones again.
--
-- Each job leaves a marker in the same step: its `pushed:<jid>` key holds the write attempt's token
-- for a few minutes. A client whose reply was lost asks push_check.lua whether its attempt wrote
-- the jobs (and fences the attempt off if not), and a job whose marker holds another attempt's token
-- was written already: it is skipped, so pushing the same payload again makes no second copy. A
-- marker fenced off for another attempt ("x:<token>") doesn't stop this one.
--
-- KEYS[1]      cogworker:queues (the registry; a wrong type there is reported, the jobs still go)
-- KEYS[2]      cogworker:wake (pub/sub: idle fetchers reading several queues wait on it)
-- KEYS[3]      cogworker:schedule
-- KEYS[4 .. 3+n]  the queue keys, one per queue group in ARGV
-- KEYS[4+n ..]    the jobs' `pushed:<jid>` markers, one per job in ARGV's order (queued, then scheduled)
-- ARGV[1]      the write attempt's token
-- ARGV[2]      how long a marker lives, ms
-- ARGV[3]      number of queue groups (n)
-- then for each group: the queue name, the number of payloads, the payloads
-- then: the number of scheduled jobs, and as many score, payload pairs
-- Only the keys the jobs are written to are checked: the schedule when a job is scheduled, a queue
-- when a job goes to it.
-- Returns 1 when written, {"unlisted", KEYS[1]} when written but the registry has the wrong type,
-- or {"wrongtype", key} when a key the jobs go to has the wrong type (nothing written).
local attempt, ttl = ARGV[1], ARGV[2]
local groups = tonumber(ARGV[3])
local wanted = {}
local at = 4
for k = 4, 3 + groups do
  wanted[#wanted + 1] = {KEYS[k], "list"}
  at = at + 2 + tonumber(ARGV[at + 1])
end
local scheduled = tonumber(ARGV[at])
if scheduled > 0 then
  wanted[#wanted + 1] = {KEYS[3], "zset"}
end
local bad = first_wrong_type(wanted)
if bad then
  return {"wrongtype", bad}
end
-- Each marker's value, read before anything is written: the read is also its type check (GET
-- refuses any type but a string), one command per job instead of a TYPE and then a GET.
local held = {}
for m = 4 + groups, #KEYS do
  local value = redis.pcall("GET", KEYS[m])
  if type(value) == "table" and value.err then
    return {"wrongtype", KEYS[m]}
  end
  held[KEYS[m]] = value
end
local listed = not is_wrong_type(KEYS[1], "set")

local fenced = "x:" .. attempt  -- not a key: the value a fenced-off marker holds
local marker = 4 + groups
-- Whether this attempt writes the next job: its marker is free, or fenced off for another attempt.
local function claim()
  local key = KEYS[marker]
  local value = held[key]
  local free = not value or (string.sub(value, 1, 2) == "x:" and value ~= fenced)
  if free then
    redis.call("SET", key, attempt, "PX", ttl)
    held[key] = attempt  -- a second job with the same jid in this call is a copy: skipped
  end
  marker = marker + 1
  return free
end

at = 4
for k = 4, 3 + groups do
  local name, count = ARGV[at], tonumber(ARGV[at + 1])
  local payloads = {}
  for i = at + 2, at + 1 + count do
    if claim() then
      payloads[#payloads + 1] = ARGV[i]
    end
  end
  if #payloads > 0 then
    redis.call("LPUSH", KEYS[k], unpack(payloads))
    if listed then
      redis.call("SADD", KEYS[1], name)
    end
    redis.call("PUBLISH", KEYS[2], name)
  end
  at = at + 2 + count
end
local entries = {}
for i = at + 1, at + 2 * scheduled, 2 do
  if claim() then
    entries[#entries + 1] = ARGV[i]
    entries[#entries + 1] = ARGV[i + 1]
  end
end
if #entries > 0 then
  redis.call("ZADD", KEYS[3], unpack(entries))
end
if not listed then
  return {"unlisted", KEYS[1]}
end
return 1
