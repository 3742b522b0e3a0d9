-- A live process squares its own in-progress list with the jobs it holds: every entry it does not
-- hold goes back to its queue. Such an entry was moved there by a fetch or BLMOVE whose reply was
-- lost (Redis stalled past the client's timeout and ran the command after the client gave up), or
-- left by a give-back that failed, or by a job thread that died (those count an orphaning).
--
-- KEYS[1]  this process's in-progress list
-- KEYS[2]  <prefix>dead
-- KEYS[3]  <prefix>queues
-- KEYS[4..]  the keys the entries need, declared by the caller from its read of the list
--          (store/job_keys.py): nq queue keys, then nc orphan counters, then nl periodic running locks
-- ARGV[1]  queue for a payload whose own queue can't be read (the processor buries it from there)
-- ARGV[2]  orphan-counter TTL in seconds
-- ARGV[3]  max orphanings: a job orphaned more often than this is filed in dead instead
-- ARGV[4]  periodic running-lock TTL in seconds
-- ARGV[5]  the caller's clock (epoch seconds), used only if TIME is refused
-- ARGV[6..8]  nq, nc, nl
-- ARGV[9 .. 8+nq+nc+nl]  the names the declared keys belong to, in KEYS order: queue names, jids,
--          entry names
-- then h, the number of held digests that follow
-- then the SHA-1 (hex) of each payload the process holds, once per copy held
-- then the SHA-1 (hex) of each payload whose job thread failed: requeued counting an orphaning
-- Returns {requeued, kept, n, left, u, <n keys of the wrong type>..., <u needs as kind, name
-- pairs>..., <raw jobs filed in dead>...}. `kept` entries are not held but stay on the list: a key of
-- the wrong type (named), or -- `left` of them -- a key the caller didn't declare (the list changed
-- after it read it), named in `needs` ("queue"/"counter"/"lock", name). The caller retries either.
--
-- Payloads are matched by digest so a process holding large jobs doesn't send them back. Copies of
-- one payload are interchangeable: the list keeps as many as are held, and the rest go back.
if redis.replicate_commands then redis.replicate_commands() end

local now = tonumber(ARGV[5])
local ok_time, time = pcall(redis.call, "TIME")
if ok_time then now = tonumber(time[1]) end

-- name -> its declared key, for each kind. Keys are only ever looked up here, never built.
local declared = {queue = {}, counter = {}, lock = {}}
local names_at = 9
do
  local k = 4
  for i, kind in ipairs({"queue", "counter", "lock"}) do
    for _ = 1, tonumber(ARGV[5 + i]) do
      declared[kind][ARGV[names_at]] = KEYS[k]
      k, names_at = k + 1, names_at + 1
    end
  end
end
local needs = {queue = {}, counter = {}, lock = {}}

local nheld = tonumber(ARGV[names_at])
local held, failed = {}, {}
for i = names_at + 1, names_at + nheld do
  held[ARGV[i]] = (held[ARGV[i]] or 0) + 1
end
for i = names_at + nheld + 1, #ARGV do
  failed[ARGV[i]] = (failed[ARGV[i]] or 0) + 1
end

local wrong, buried = {}, {}
local requeued, kept, left = 0, 0, 0

local function decode(job)
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == "table" then
    return decoded
  end
  return {}
end

-- The queue name an entry goes back to (store/job_keys.py reads payloads the same way).
local function queue_of(job)
  if type(job["queue"]) == "string" and job["queue"] ~= "" then
    return job["queue"]
  end
  return ARGV[1]
end

-- The periodic entry whose running lock the job holds, or nil.
local function entry_of(job)
  local pname = job["periodic_name"]
  if job["periodic_until_executed"] == true and type(pname) == "string" and type(job["jid"]) == "string" then
    return pname
  end
  return nil
end

-- The declared keys an entry needs, or nil after noting each one missing.
local function keys_for(job, counting)
  local queue, pname = queue_of(job), entry_of(job)
  local found = {queue = declared.queue[queue]}
  if not found.queue then needs.queue[queue] = true end
  local complete = found.queue ~= nil
  if counting then
    found.counter = declared.counter[job["jid"]]
    if not found.counter then needs.counter[job["jid"]], complete = true, false end
  end
  if pname then
    found.lock = declared.lock[pname]
    if not found.lock then needs.lock[pname], complete = true, false end
  end
  return complete and found or nil
end

local function retake_running_lock(key, jid)
  local holder = redis.pcall("GET", key)
  if holder == false or holder == jid then
    redis.pcall("SET", key, jid, "EX", ARGV[4])
  end
end

-- The count after this orphaning; nil when the counter has the wrong type (nothing counted).
local function count_orphaning(key)
  local count = redis.pcall("INCR", key)
  if type(count) ~= "number" then
    wrong[key] = true
    return nil
  end
  redis.call("EXPIRE", key, ARGV[2])
  return count
end

-- Each job is written where it goes and only then taken off the list: Redis keeps what a script
-- wrote before an error, so an error can cost a duplicate, never a job.
local function put_back(raw, job, found, orphaned)
  if orphaned > tonumber(ARGV[3]) then
    if type(redis.pcall("ZADD", KEYS[2], now, raw)) ~= "number" then
      wrong[KEYS[2]] = true
      return false
    end
    buried[#buried + 1] = raw
  else
    if type(redis.pcall("RPUSH", found.queue, raw)) ~= "number" then
      wrong[found.queue] = true
      return false
    end
    redis.pcall("SADD", KEYS[3], queue_of(job))
    if found.lock then retake_running_lock(found.lock, job["jid"]) end
    requeued = requeued + 1
  end
  redis.call("LREM", KEYS[1], 1, raw)
  return true
end

-- From the head (newest) to the tail: pushing each onto the popped end leaves the oldest to be
-- popped first, as requeue.lua does. An entry whose keys weren't declared is left where it is,
-- untouched (its thread-failure digest unspent), for the caller's next pass.
for _, raw in ipairs(redis.call("LRANGE", KEYS[1], 0, -1)) do
  local digest = redis.sha1hex(raw)
  if (held[digest] or 0) > 0 then
    held[digest] = held[digest] - 1
  else
    local job = decode(raw)
    local counting = (failed[digest] or 0) > 0 and type(job["jid"]) == "string"
    local found = keys_for(job, counting)
    if not found then
      kept, left = kept + 1, left + 1
    else
      local orphaned = 0
      if counting then
        failed[digest] = failed[digest] - 1
        orphaned = count_orphaning(found.counter)
      end
      if orphaned == nil or not put_back(raw, job, found, orphaned) then
        if counting and orphaned ~= nil then redis.call("DECR", found.counter) end
        kept = kept + 1
      end
    end
  end
end

local reply = {requeued, kept, 0, left, 0}
for key in pairs(wrong) do
  reply[#reply + 1] = key
  reply[3] = reply[3] + 1
end
for _, kind in ipairs({"queue", "counter", "lock"}) do
  for name in pairs(needs[kind]) do
    reply[#reply + 1] = kind
    reply[#reply + 1] = name
    reply[5] = reply[5] + 1
  end
end
for _, raw in ipairs(buried) do reply[#reply + 1] = raw end
return reply
