-- Acknowledge finished jobs and fetch new ones, in one round trip (reliable fetch).
--
-- KEYS[1]      this process's in-progress list
-- KEYS[2]      <prefix>paused (set of paused queue names)
-- KEYS[3]      <prefix>stat:processed
-- KEYS[4]      <prefix>stat:processed:<today>
-- KEYS[5 .. 4+q]  queue keys, in the order to try (already weight-shuffled by the caller)
-- KEYS[5+q .. 4+2q]  each queue's suspects list, in the same order
-- KEYS[5+2q ..]   the orphan counters of the acknowledged jobs (an acknowledged job's count is moot)
-- ARGV[1]      most jobs to fetch (0: only acknowledge)
-- ARGV[2]      number of acknowledgements that follow (n)
-- ARGV[3 .. 2+n]  the acknowledged jobs' raw payloads
-- ARGV[3+n]    q, the number of queue keys
-- ARGV[4+n .. 3+n+q]  each queue key's queue name, in the same order (to tell a paused queue by name)
-- ARGV[4+n+q]  "1" while this process runs a suspect it was given, else ""
-- Returns {acked, paused_count, bad_count, mode, refused, <bad keys>..., queue_key, raw, queue_key,
-- raw, ...}.
-- mode 0: an ordinary fetch. 1: this process runs a suspect alone (the one job returned, or one
-- still on its list): fetch nothing else, nor block on a queue, until it has left the list. 2: a
-- suspect waits on one of our queues: nothing fetched, so the list empties and one can be taken.
-- A queue key (or suspects list) of the wrong type is skipped and named (bad), not raised: an error
-- after an earlier LMOVE would abort the script with that job already moved and the caller never
-- told of it. Our own list of the wrong type is an error, raised before anything moved (the key
-- guard moves it aside).
-- Any other error of a move (LMOVE renamed away, or refused to this ACL user; a full memory) stops
-- the fetch, and its text is returned as `refused` ("" when none) with the jobs moved before it: the
-- caller tells an unsupported command from other errors by that text (worker/fetching/fetch.py `refused`).
--
-- Suspects (jobs orphaned more than once, worker/recovering/recovery.py) run alone, so that a death while one
-- runs is its own: a process takes one only with nothing else on its list, and takes nothing else
-- until it is gone. While one waits, processes reading its queue take nothing new: one of them
-- empties its list and takes it. Without a suspect this costs one EXISTS over every suspects list.
--
-- Each job moves inside this one script (LMOVE, or LRANGE + LPUSH + LTRIM for several) so that it is
-- never anywhere but on a queue or on exactly one in-progress list: a process that dies after this script ran leaves its jobs where recovery finds
-- them. Acknowledging here saves a round trip per job; a job acknowledged late only risks running
-- again, never being lost.
local inprogress = KEYS[1]
local want = tonumber(ARGV[1])
local nacks = tonumber(ARGV[2])
local nqueues = tonumber(ARGV[3 + nacks])
-- How far past the acknowledged count the tail window reaches (see below).
local TAIL_SLACK = 8

-- Above this mean size of the acknowledged payloads, no tail window (below).
local TAIL_MAX_BYTES = 2048

local acked = 0
-- How many copies of each acknowledged payload are still to be taken off the list.
local pending = {}
local ack_bytes = 0
for i = 3, 2 + nacks do
  pending[ARGV[i]] = (pending[ARGV[i]] or 0) + 1
  ack_bytes = ack_bytes + #ARGV[i]
end
-- Jobs finish about in the order they were fetched, and the oldest entries are at the list's tail:
-- with several acknowledgements, one LRANGE of the tail and one LTRIM take off the acknowledged
-- entries found there, and the few unacknowledged ones among them (a longer job still running) go
-- back to the tail with one RPUSH, in their order. That is 2-3 commands for the batch instead of
-- an LREM per job (Redis commands per job, issue 18). Entries not found in that window are removed
-- one payload at a time as before. The window copies each entry it reads into the script and each
-- one it keeps back out again, where an LREM compares in place: for large payloads (the payload
-- curve, 10 KB and up) the LREMs cost Redis less CPU than the commands they save.
if nacks >= 3 and ack_bytes <= nacks * TAIL_MAX_BYTES then
  local tail = redis.call("LRANGE", inprogress, -(nacks + TAIL_SLACK), -1)
  local cut = nil
  local matched = {}
  for j = #tail, 1, -1 do  -- from the oldest: an LREM with a negative count takes those first
    local left = pending[tail[j]]
    if left and left > 0 then
      pending[tail[j]] = left - 1
      matched[j] = true
      cut = j
    end
  end
  if cut then
    local keep = {}
    for j = cut, #tail do
      if not matched[j] then keep[#keep + 1] = tail[j] end
    end
    redis.call("LTRIM", inprogress, 0, -(#tail - cut + 1) - 1)
    if #keep > 0 then
      redis.call("RPUSH", inprogress, unpack(keep))
    end
    acked = #tail - cut + 1 - #keep
  end
end
for raw, copies in pairs(pending) do
  if copies > 0 then
    acked = acked + redis.call("LREM", inprogress, -copies, raw)
  end
end
-- One DEL for the batch: almost every counter is absent (only orphaned jobs have one), and a
-- command per job would cost more than the check.
if #KEYS > 4 + 2 * nqueues then
  redis.call("DEL", unpack(KEYS, 5 + 2 * nqueues, #KEYS))
end
if acked > 0 then
  count_processed(KEYS[3], KEYS[4], acked)
end

local reply = {acked, 0, 0, 0, ""}
if want <= 0 then
  return reply
end
-- A pcall's error: true when a key had the wrong type (the queue is skipped), else the error stops
-- every move (kept in `refused`).
local refused = ""
local function wrong_type(err)
  if string.sub(err, 1, 9) == "WRONGTYPE" then
    return true
  end
  refused = err
  return false
end
local bad = {}
local paused = {}
for _, name in ipairs(redis.call("SMEMBERS", KEYS[2])) do
  paused[name] = true
end

-- Whether any of KEYS[first .. last] exists, in EXISTS calls of at most 1,000 keys (unpack's limit
-- is about 8,000). A list that empties is deleted, so for lists this asks "is any non-empty?"; a key
-- of another type exists too, and the command that follows names it.
local function any_exists(first, last)
  for from = first, last, 1000 do
    if redis.call("EXISTS", unpack(KEYS, from, math.min(from + 999, last))) > 0 then
      return true
    end
  end
  return false
end

-- The index of the first existing key of KEYS[first .. last] (last - first < 1,000), or nil: one
-- EXISTS, and when one does exist, log2(last - first) more, halving the range.
local function first_existing(first, last)
  if not any_exists(first, last) then
    return nil
  end
  while first < last do
    local middle = math.floor((first + last) / 2)
    if any_exists(first, middle) then
      last = middle
    else
      first = middle + 1
    end
  end
  return first
end

local held = redis.call("LLEN", inprogress)
if ARGV[4 + nacks + nqueues] == "1" and held > 0 then
  reply[4] = 1
  return reply
end
-- Almost always no suspects list exists: one EXISTS for all of them, instead of an LLEN per queue
-- that made a fetch from 1,000 queues cost 1,000 commands (the number-of-queues curve, issue 38).
local suspected = any_exists(5 + nqueues, 4 + 2 * nqueues)
for k = 5, suspected and 4 + nqueues or 4 do
  local suspects = KEYS[k + nqueues]
  if not paused[ARGV[k - 1 + nacks]] then
    local waiting = redis.pcall("LLEN", suspects)
    if type(waiting) ~= "number" then
      bad[#bad + 1] = suspects
    elseif waiting > 0 then
      if held > 0 then
        reply[4] = 2
      else
        local raw = redis.pcall("LMOVE", suspects, inprogress, "RIGHT", "LEFT")
        reply[3] = #bad
        if type(raw) == "table" and raw.err then
          -- Refused (renamed away, denied): named like a queue's refusal, so the caller falls back.
          if wrong_type(raw.err) then
            bad[#bad + 1] = suspects
            reply[3] = #bad
          end
          reply[5] = refused
          for _, key in ipairs(bad) do reply[#reply + 1] = key end
          return reply
        end
        reply[4] = 1
        for _, key in ipairs(bad) do reply[#reply + 1] = key end
        reply[#reply + 1] = KEYS[k]
        reply[#reply + 1] = raw
      end
      break
    end
  end
end
if reply[4] ~= 0 then
  if reply[4] == 2 then
    reply[3] = #bad
    for _, key in ipairs(bad) do reply[#reply + 1] = key end
  end
  return reply
end
-- From this many jobs to take from one queue, the batch move below costs fewer commands than LMOVEs.
local MANY = 3
-- After an empty queue, one EXISTS asks whether any of the next SKIM queues has jobs: when none has,
-- they are passed over without a command each, and when some has, a few more EXISTS (halving) find
-- the first. With many queues and few of them holding jobs, a fetch then costs about a command per
-- SKIM empty queues and six per queue with jobs, not one per queue (issue 38).
local SKIM = 32
local probe = false  -- the last queue tried was empty: ask about the next ones before trying them
local skip_to = 0  -- the queues before this index of KEYS are known to be empty
local got = 0
local jobs = {}
for k = 5, 4 + nqueues do
  local queue = KEYS[k]
  local empty = false
  if probe and k >= skip_to then
    local last = math.min(k + SKIM - 1, 4 + nqueues)
    skip_to = first_existing(k, last) or last + 1
    probe = skip_to > last
  end
  if paused[ARGV[k - 1 + nacks]] then
    reply[2] = reply[2] + 1
  elseif k >= skip_to then
    while got < want do
      if want - got < MANY then
        local raw = redis.pcall("LMOVE", queue, inprogress, "RIGHT", "LEFT")
        if type(raw) == "table" and raw.err then
          if wrong_type(raw.err) then bad[#bad + 1] = queue end
          break
        end
        if not raw then
          empty = true
          break
        end
        jobs[#jobs + 1] = queue
        jobs[#jobs + 1] = raw
        got = got + 1
      else
        -- Several jobs at once: LRANGE + LPUSH + LTRIM (3 commands for up to `want` jobs), in the
        -- order repeated LMOVEs would leave them. The push comes before the trim, so a failing push
        -- leaves the queue as it was; the script is atomic, so no one sees the jobs on both lists.
        local taken = redis.pcall("LRANGE", queue, -(want - got), -1)
        if taken.err then  -- LRANGE replies with a list, or an error table
          if wrong_type(taken.err) then bad[#bad + 1] = queue end
          break
        end
        if #taken == 0 then
          empty = true
          break
        end
        local moved = {}
        for j = #taken, 1, -1 do
          moved[#moved + 1] = taken[j]
        end
        local pushed = redis.pcall("LPUSH", inprogress, unpack(moved))
        if type(pushed) == "table" and pushed.err then
          if wrong_type(pushed.err) then
            return redis.error_reply(pushed.err)  -- our own list has the wrong type: nothing moved
          end
          break
        end
        for _, raw in ipairs(moved) do
          jobs[#jobs + 1] = queue
          jobs[#jobs + 1] = raw
        end
        redis.call("LTRIM", queue, 0, -#taken - 1)
        got = got + #taken
        if got < want then  -- the queue is empty now
          empty = true
          break
        end
      end
    end
  end
  if got >= want or refused ~= "" then break end
  probe = probe or empty
end
reply[3] = #bad
reply[5] = refused
for _, key in ipairs(bad) do reply[#reply + 1] = key end
for _, item in ipairs(jobs) do reply[#reply + 1] = item end
return reply
