-- Acknowledge finished jobs and fetch new ones, in one round trip (reliable fetch).
--
-- KEYS[1]      this process's in-progress list
-- KEYS[2]      <prefix>paused (set of paused queue names)
-- KEYS[3]      <prefix>stat:processed
-- KEYS[4]      <prefix>stat:processed:<today>
-- KEYS[5 .. 4+q]  queue keys, in the order to try (already weight-shuffled by the caller)
-- KEYS[5+q ..]    the orphan counters of the acknowledged jobs (an acknowledged job's count is moot)
-- ARGV[1]      most jobs to fetch (0: only acknowledge)
-- ARGV[2]      number of acknowledgements that follow (n)
-- ARGV[3 .. 2+n]  the acknowledged jobs' raw payloads
-- ARGV[3+n]    q, the number of queue keys
-- ARGV[4+n ..]    each queue key's queue name, in the same order (to tell a paused queue by name)
-- Returns {acked, paused_count, bad_count, <bad queue keys>..., queue_key, raw, queue_key, raw, ...}.
-- A queue key of the wrong type is skipped and named (bad), not raised: an error after an earlier
-- LMOVE would abort the script with that job already moved and the caller never told of it.
--
-- Each job is moved with LMOVE so that it is never anywhere but on a queue or on exactly one
-- in-progress list: a process that dies after this script ran leaves its jobs where recovery finds
-- them. Acknowledging here saves a round trip per job; a job acknowledged late only risks running
-- again, never being lost.
local inprogress = KEYS[1]
local want = tonumber(ARGV[1])
local nacks = tonumber(ARGV[2])
local nqueues = tonumber(ARGV[3 + nacks])

local acked = 0
for i = 3, 2 + nacks do
  if redis.call("LREM", inprogress, -1, ARGV[i]) > 0 then
    acked = acked + 1
  end
end
-- One DEL for the batch: almost every counter is absent (only orphaned jobs have one), and a
-- command per job would cost more than the check.
if #KEYS > 4 + nqueues then
  redis.call("DEL", unpack(KEYS, 5 + nqueues, #KEYS))
end
if acked > 0 then
  redis.call("INCRBY", KEYS[3], acked)
  -- The day's counter gets its expiry once, when this batch created it.
  if redis.call("INCRBY", KEYS[4], acked) == acked then
    redis.call("EXPIRE", KEYS[4], 60 * 60 * 24 * 365)
  end
end

local reply = {acked, 0, 0}
if want <= 0 then
  return reply
end
local bad = {}
local paused = {}
for _, name in ipairs(redis.call("SMEMBERS", KEYS[2])) do
  paused[name] = true
end
local got = 0
local jobs = {}
for k = 5, 4 + nqueues do
  local queue = KEYS[k]
  if paused[ARGV[k - 1 + nacks]] then
    reply[2] = reply[2] + 1
  else
    while got < want do
      local raw = redis.pcall("LMOVE", queue, inprogress, "RIGHT", "LEFT")
      if type(raw) == "table" and raw.err then
        bad[#bad + 1] = queue
        break
      end
      if not raw then break end
      jobs[#jobs + 1] = queue
      jobs[#jobs + 1] = raw
      got = got + 1
    end
  end
  if got >= want then break end
end
reply[3] = #bad
for _, queue in ipairs(bad) do reply[#reply + 1] = queue end
for _, item in ipairs(jobs) do reply[#reply + 1] = item end
return reply
