-- Requeue every job on a process's in-progress list, after checking -- in this same atomic step --
-- that the process really is dead. Checked separately, an owner that beat between the check and
-- the requeue would keep running jobs that a second process also runs.
--
-- KEYS[1]  the owner's in-progress list
-- KEYS[2]  the owner's presence key (cogworker:process:<identity>)
-- KEYS[3]  cogworker:last-beat (hash identity -> seconds on Redis's clock)
-- KEYS[4]  cogworker:dead
-- KEYS[5]  cogworker:queues
-- KEYS[6]  cogworker:live-queues
-- KEYS[7]  cogworker:cancels (jid -> when it was cancelled): a job named there is not requeued
-- ARGV[1]  queue key prefix
-- ARGV[2]  queue for a payload whose own queue can't be read (the processor buries it from there)
-- ARGV[3]  the owner's identity
-- ARGV[4]  seconds of silence that make the owner dead; "" = known dead, don't check
-- ARGV[5]  orphan-counter key prefix; "" = don't count (a clean shutdown requeueing its own list)
-- ARGV[6]  orphan-counter TTL in seconds
-- ARGV[7]  max orphanings: a job orphaned more often than this is filed in dead instead
-- ARGV[8]  live-queue window in seconds
-- ARGV[9]  periodic running-lock key prefix
-- ARGV[10] periodic running-lock TTL in seconds
-- ARGV[11] the caller's clock (epoch seconds), used only if TIME is refused
-- Returns {moved, failed, n, m, c, <n queue names no live process reads>..., <m keys of the wrong
-- type>..., <c raw jobs cancelled>..., <raw jobs filed in dead>...}, or {-1, 0, 0, 0, 0} when the owner
-- turned out to be alive. A job whose queue, orphan counter or dead set has the wrong type is kept on
-- the list (failed) and that key named, for the key guard. A job `cogworker.cancel` was asked for
-- (its jid in the cancel record) is taken off the list and returned, not requeued: it was cancelled
-- while its process was dying, and must not run again (the caller counts it and releases its locks).
if redis.replicate_commands then redis.replicate_commands() end

local now = tonumber(ARGV[11])
local ok_time, time = pcall(redis.call, "TIME")
if ok_time then now = tonumber(time[1]) end

if ARGV[4] ~= "" then
  if redis.call("EXISTS", KEYS[2]) == 1 then
    return {-1, 0, 0, 0, 0}
  end
  -- A stamp that isn't a number counts as none: the presence key alone then decides.
  local last = tonumber(redis.call("HGET", KEYS[3], ARGV[3]) or "")
  if last and now - last <= tonumber(ARGV[4]) then
    return {-1, 0, 0, 0, 0}
  end
end

local moved, failed = 0, 0
local buried, unlisted, wrong, cancelled = {}, {}, {}, {}

-- A cancel record of the wrong type answers an error: read as "not cancelled" (the key guard's
-- pass moves it aside), so recovery itself never stops on it.
local function is_cancelled(jid)
  return jid ~= nil and type(redis.pcall("ZSCORE", KEYS[7], jid)) == "string"
end

local function retake_running_lock(key, jid, ttl)
  local holder = redis.pcall("GET", key)
  if type(holder) == "table" and holder.err then
    wrong[key] = true
    return
  end
  if not holder or holder == jid then
    redis.call("SET", key, jid, "EX", ttl)
  end
end

-- The queue name the job goes back to, and its jid (or nil).
local function read_job(job)
  local queue, jid = ARGV[2], nil
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == "table" then
    if type(decoded["queue"]) == "string" and decoded["queue"] ~= "" then
      queue = decoded["queue"]
    end
    if type(decoded["jid"]) == "string" then
      jid = decoded["jid"]
    end
    local pname = decoded["periodic_name"]
    if decoded["periodic_until_executed"] == true and type(pname) == "string" and jid then
      retake_running_lock(ARGV[9] .. pname, jid, ARGV[10])
    end
  end
  return queue, jid
end

-- The job's orphan count after this orphaning, or nil when its counter has the wrong type.
local function count_orphaning(jid)
  local key = ARGV[5] .. jid
  local count = redis.pcall("INCR", key)
  if type(count) ~= "number" then
    wrong[key] = true
    return nil
  end
  redis.call("EXPIRE", key, ARGV[6])
  return count
end

-- Writes the job where it goes; returns "buried", "moved", or nil when a key had the wrong type
-- (nothing written for it then).
local function place(job, queue, orphaned)
  if orphaned > tonumber(ARGV[7]) then
    -- A poison pill: it keeps killing its process. Filed raw; the caller swaps in a proper entry.
    if type(redis.pcall("ZADD", KEYS[4], now, job)) ~= "number" then
      wrong[KEYS[4]] = true
      return nil
    end
    return "buried"
  end
  local pushed = redis.pcall("RPUSH", ARGV[1] .. queue, job)
  if type(pushed) ~= "number" then
    wrong[ARGV[1] .. queue] = true
    return nil
  end
  return "moved"
end

-- One pass over the list as it stands. The newest job is at the head: taking from the head and
-- pushing onto the popped end leaves the oldest job to be popped first. Each job is written where it
-- goes and only then taken off, so a script stopped by an error loses nothing (Redis keeps the
-- writes made before the error). A job that can't be written (a key of the wrong type) goes to the
-- back of the list -- pushed there before it is taken off the head -- for the next pass.
local count = redis.call("LLEN", KEYS[1])
for _ = 1, count do
  local job = redis.call("LINDEX", KEYS[1], 0)
  if not job then break end
  local queue, jid = read_job(job)
  local outcome
  local counted = false
  if is_cancelled(jid) then
    outcome = "cancelled"
  else
    local orphaned = 0
    if ARGV[5] ~= "" and jid then
      orphaned = count_orphaning(jid)
      counted = orphaned ~= nil
    end
    outcome = orphaned and place(job, queue, orphaned)
  end
  if outcome == nil then
    redis.call("RPUSH", KEYS[1], job)
    if counted then redis.call("DECR", ARGV[5] .. jid) end
    failed = failed + 1
  elseif outcome == "buried" then
    buried[#buried + 1] = job
  elseif outcome == "cancelled" then
    cancelled[#cancelled + 1] = job  -- taken off the list below, written nowhere
  else
    moved = moved + 1
    local seen = tonumber(redis.pcall("ZSCORE", KEYS[6], queue) or "")
    if not seen or seen < now - tonumber(ARGV[8]) then
      redis.pcall("SADD", KEYS[5], queue)
      unlisted[queue] = true
    end
  end
  redis.call("LPOP", KEYS[1])
end

local reply = {moved, failed, 0, 0, #cancelled}
for name in pairs(unlisted) do
  reply[#reply + 1] = name
  reply[3] = reply[3] + 1
end
for key in pairs(wrong) do
  reply[#reply + 1] = key
  reply[4] = reply[4] + 1
end
for _, job in ipairs(cancelled) do reply[#reply + 1] = job end
for _, job in ipairs(buried) do reply[#reply + 1] = job end
return reply
