-- A live process squares its own in-progress list with the jobs it holds: every entry it does not
-- hold goes back to its queue. Such an entry was moved there by a fetch or BLMOVE whose reply was
-- lost (Redis stalled past the client's timeout and ran the command after the client gave up), or
-- left by a give-back that failed, or by a job thread that died (those count an orphaning).
--
-- KEYS[1]  this process's in-progress list
-- KEYS[2]  <prefix>dead
-- KEYS[3]  <prefix>queues
-- KEYS[4..]  the keys the entries need, declared by the caller from its read of the list
--          (store/job_keys.py): nq (queue key, suspects key) pairs, then nc orphan counters by jid,
--          nl periodic running locks, nd orphan counters by payload digest (entries without a jid)
-- ARGV[1]  queue for a payload whose own queue can't be read (the processor buries it from there)
-- ARGV[2]  orphan-counter TTL in seconds
-- ARGV[3]  max orphanings: a job orphaned more often than this is filed in dead instead
-- ARGV[4]  periodic running-lock TTL in seconds
-- ARGV[5]  the caller's clock (epoch seconds), used only if TIME is refused
-- ARGV[6]  suspect at: an entry orphaned this many times goes back to its queue's suspects list
-- ARGV[7..10]  nq, nc, nl, nd
-- ARGV[11 .. 10+nq+nc+nl+nd]  the names the declared keys belong to, in KEYS order: queue names,
--          jids, entry names, payload digests
-- then h, the number of held digests that follow
-- then the SHA-1 (hex) of each payload the process holds, once per copy held
-- then the SHA-1 (hex) of each payload whose job thread failed: requeued counting an orphaning
-- A thread's failure is its own job's: unlike a process's death (requeue.lua) it convicts the job
-- past the limit however many others the process held.
-- Returns {requeued, kept, n, left, u, <n keys of the wrong type>..., <u needs as kind, name
-- pairs>..., <raw jobs filed in dead>...}. `kept` entries are not held but stay on the list: a key of
-- the wrong type (named), or -- `left` of them -- a key the caller didn't declare (the list changed
-- after it read it), named in `needs` ("queue"/"counter"/"lock"/"digest", name). The caller retries either.
--
-- Payloads are matched by digest so a process holding large jobs doesn't send them back. Copies of
-- one payload are interchangeable: the list keeps as many as are held, and the rest go back.
local now = redis_clock(ARGV[5])

-- name -> its declared key, for each kind (read_declared); the held digests follow the names.
local declared, _, names_at = read_declared(4, 7)
local needs = {queue = {}, counter = {}, lock = {}, digest = {}}
local suspect_at = tonumber(ARGV[6])

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

local function retake_running_lock(key, jid)
  local holder = redis.pcall("GET", key)
  if holder == false or holder == jid then
    redis.pcall("SET", key, jid, "EX", ARGV[4])
  end
end

-- Each job is written where it goes and only then taken off the list: Redis keeps what a script
-- wrote before an error, so an error can cost a duplicate, never a job. A job orphaned often enough
-- to be a suspect goes back to its queue's suspects list, to be run alone (requeue.lua says why).
-- Only a failed thread's orphaning (`counted`) can bury: a count merely read never does.
local function put_back(raw, queue, jid, found, orphaned, counted)
  if counted and orphaned > tonumber(ARGV[3]) then
    if type(redis.pcall("ZADD", KEYS[2], now, raw)) ~= "number" then
      wrong[KEYS[2]] = true
      return false
    end
    buried[#buried + 1] = raw
  else
    local target = orphaned >= suspect_at and found.suspects or found.queue
    if type(redis.pcall("RPUSH", target, raw)) ~= "number" then
      wrong[target] = true
      return false
    end
    redis.pcall("SADD", KEYS[3], queue)
    if found.lock then retake_running_lock(found.lock, jid) end
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
    local queue, jid, pname = read_job(raw, ARGV[1])
    local counting = (failed[digest] or 0) > 0
    local found = declared_keys_for(declared, needs, raw, queue, jid, pname, digest)
    if not found then
      kept, left = kept + 1, left + 1
    else
      if counting then failed[digest] = failed[digest] - 1 end
      local orphaned = count_orphaning(found.counter, counting, ARGV[2], wrong)
      if orphaned == nil or not put_back(raw, queue, jid, found, orphaned, counting) then
        if counting and orphaned ~= nil then redis.call("DECR", found.counter) end
        kept = kept + 1
      end
    end
  end
end

local reply = {requeued, kept, 0, left, 0}
append_names(reply, wrong, 3)
append_needs(reply, needs, {"queue", "counter", "lock", "digest"}, 5)
for _, raw in ipairs(buried) do reply[#reply + 1] = raw end
return reply
