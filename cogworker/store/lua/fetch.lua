-- Acknowledge finished jobs and fetch new ones, in one round trip (reliable fetch).
--
-- KEYS[1]      this process's in-progress list
-- KEYS[2]      cogworker:paused (set of paused queue names)
-- KEYS[3]      cogworker:stat:processed
-- KEYS[4]      cogworker:stat:processed:<today>
-- KEYS[5..n]   queue keys, in the order to try (already weight-shuffled by the caller)
-- ARGV[1]      most jobs to fetch (0: only acknowledge)
-- ARGV[2]      number of acknowledgements that follow
-- ARGV[3..]    acknowledgements as pairs: raw payload, jid
-- ARGV[last-1] orphan-counter key prefix (an acknowledged job's count is moot)
-- ARGV[last]   queue key prefix (to tell a paused queue by name)
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
local counter_prefix = ARGV[3 + 2 * nacks]
local queue_prefix = ARGV[4 + 2 * nacks]

local acked = 0
local counters = {}
for i = 0, nacks - 1 do
  local raw, jid = ARGV[3 + 2 * i], ARGV[4 + 2 * i]
  if redis.call("LREM", inprogress, -1, raw) > 0 then
    acked = acked + 1
  end
  if jid ~= "" then
    counters[#counters + 1] = counter_prefix .. jid
  end
end
-- One DEL for the batch: almost every counter is absent (only orphaned jobs have one), and a
-- command per job would cost more than the check.
if #counters > 0 then
  redis.call("DEL", unpack(counters))
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
  paused[queue_prefix .. name] = true
end
local got = 0
local jobs = {}
for k = 5, #KEYS do
  local queue = KEYS[k]
  if paused[queue] then
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
