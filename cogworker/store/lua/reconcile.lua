-- A live process squares its own in-progress list with the jobs it holds: every entry it does not
-- hold goes back to its queue. Such an entry was moved there by a fetch or BLMOVE whose reply was
-- lost (Redis stalled past the client's timeout and ran the command after the client gave up), or
-- left by a give-back that failed, or by a job thread that died (those count an orphaning).
--
-- KEYS[1]  this process's in-progress list
-- KEYS[2]  cogworker:dead
-- KEYS[3]  cogworker:queues
-- ARGV[1]  queue key prefix
-- ARGV[2]  queue for a payload whose own queue can't be read (the processor buries it from there)
-- ARGV[3]  orphan-counter key prefix
-- ARGV[4]  orphan-counter TTL in seconds
-- ARGV[5]  max orphanings: a job orphaned more often than this is filed in dead instead
-- ARGV[6]  periodic running-lock key prefix
-- ARGV[7]  periodic running-lock TTL in seconds
-- ARGV[8]  the caller's clock (epoch seconds), used only if TIME is refused
-- ARGV[9]  h, the number of held digests that follow
-- ARGV[10 .. 9+h]  SHA-1 (hex) of each payload the process holds, once per copy held
-- ARGV[10+h ..]    SHA-1 (hex) of each payload whose job thread failed: requeued counting an orphaning
-- Returns {requeued, kept, n, <n keys of the wrong type>..., <raw jobs filed in dead>...}. `kept`
-- entries are not held but stay on the list (a key of the wrong type, named): the caller retries.
--
-- Payloads are matched by digest so a process holding large jobs doesn't send them back. Copies of
-- one payload are interchangeable: the list keeps as many as are held, and the rest go back.
if redis.replicate_commands then redis.replicate_commands() end

local now = tonumber(ARGV[8])
local ok_time, time = pcall(redis.call, "TIME")
if ok_time then now = tonumber(time[1]) end

local nheld = tonumber(ARGV[9])
local held, failed = {}, {}
for i = 10, 9 + nheld do
  held[ARGV[i]] = (held[ARGV[i]] or 0) + 1
end
for i = 10 + nheld, #ARGV do
  failed[ARGV[i]] = (failed[ARGV[i]] or 0) + 1
end

local wrong, buried = {}, {}
local requeued, kept = 0, 0

local function decode(job)
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == "table" then
    return decoded
  end
  return {}
end

local function retake_running_lock(job)
  local pname, jid = job["periodic_name"], job["jid"]
  if job["periodic_until_executed"] == true and type(pname) == "string" and type(jid) == "string" then
    local key = ARGV[6] .. pname
    local holder = redis.pcall("GET", key)
    if holder == false or holder == jid then
      redis.pcall("SET", key, jid, "EX", ARGV[7])
    end
  end
end

-- The count after this orphaning; nil when the counter has the wrong type (nothing counted).
local function count_orphaning(jid)
  local key = ARGV[3] .. jid
  local count = redis.pcall("INCR", key)
  if type(count) ~= "number" then
    wrong[key] = true
    return nil
  end
  redis.call("EXPIRE", key, ARGV[4])
  return count
end

-- Each job is written where it goes and only then taken off the list: Redis keeps what a script
-- wrote before an error, so an error can cost a duplicate, never a job.
local function put_back(raw, job, orphaned)
  local queue = ARGV[2]
  if type(job["queue"]) == "string" and job["queue"] ~= "" then
    queue = job["queue"]
  end
  local key = ARGV[1] .. queue
  if orphaned > tonumber(ARGV[5]) then
    if type(redis.pcall("ZADD", KEYS[2], now, raw)) ~= "number" then
      wrong[KEYS[2]] = true
      return false
    end
    buried[#buried + 1] = raw
  else
    if type(redis.pcall("RPUSH", key, raw)) ~= "number" then
      wrong[key] = true
      return false
    end
    redis.pcall("SADD", KEYS[3], queue)
    retake_running_lock(job)
    requeued = requeued + 1
  end
  redis.call("LREM", KEYS[1], 1, raw)
  return true
end

-- From the head (newest) to the tail: pushing each onto the popped end leaves the oldest to be
-- popped first, as requeue.lua does.
for _, raw in ipairs(redis.call("LRANGE", KEYS[1], 0, -1)) do
  local digest = redis.sha1hex(raw)
  if (held[digest] or 0) > 0 then
    held[digest] = held[digest] - 1
  else
    local job = decode(raw)
    local orphaned = 0
    local counted = false
    if (failed[digest] or 0) > 0 and type(job["jid"]) == "string" then
      failed[digest] = failed[digest] - 1
      orphaned = count_orphaning(job["jid"])
      counted = orphaned ~= nil
    end
    if orphaned == nil or not put_back(raw, job, orphaned or 0) then
      if counted then redis.call("DECR", ARGV[3] .. job["jid"]) end
      kept = kept + 1
    end
  end
end

local reply = {requeued, kept, 0}
for key in pairs(wrong) do
  reply[#reply + 1] = key
  reply[3] = reply[3] + 1
end
for _, raw in ipairs(buried) do reply[#reply + 1] = raw end
return reply
