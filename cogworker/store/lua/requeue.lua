-- Requeue every job on a process's in-progress list, after checking -- in this same atomic step --
-- that the process really is dead. Checked separately, an owner that beat between the check and
-- the requeue would keep running jobs that a second process also runs.
--
-- A death convicts only a job that was alone on the list: a job that shared it with others may be
-- an innocent beside a poison pill. Every death is counted, but a shared one buries nobody; a job
-- orphaned `suspect at` times or more goes to its queue's suspects list instead of its queue, and a
-- process runs a suspect alone (fetch.lua), so its next death is its own.
--
-- KEYS[1]  the owner's in-progress list
-- KEYS[2]  the owner's presence key (<prefix>process:<identity>)
-- KEYS[3]  <prefix>last-beat (hash identity -> seconds on Redis's clock)
-- KEYS[4]  <prefix>dead
-- KEYS[5]  <prefix>queues
-- KEYS[6]  <prefix>live-queues
-- KEYS[7]  <prefix>cancels (jid -> when it was cancelled): a job named there is not requeued
-- KEYS[8..]  the keys the jobs need, declared by the caller from its read of the list
--          (store/job_keys.py): nq (queue key, suspects key) pairs, then nc orphan counters by jid,
--          nl periodic running locks, nd orphan counters by payload digest (jobs without a jid)
-- ARGV[1]  queue for a payload whose own queue can't be read (the processor buries it from there)
-- ARGV[2]  the owner's identity
-- ARGV[3]  seconds of silence that make the owner dead; "" = known dead, don't check
-- ARGV[4]  "1" to count orphanings, "" not to (a clean shutdown requeueing its own list)
-- ARGV[5]  orphan-counter TTL in seconds
-- ARGV[6]  max orphanings: a job orphaned more often than this, alone, is filed in dead instead
-- ARGV[7]  live-queue window in seconds
-- ARGV[8]  periodic running-lock TTL in seconds
-- ARGV[9]  the caller's clock (epoch seconds), used only if TIME is refused
-- ARGV[10] suspect at: a job orphaned this many times goes to its queue's suspects list
-- ARGV[11] "1" when an earlier pass over this list saw it hold more than one job, else ""
-- ARGV[12..15]  nq, nc, nl, nd
-- ARGV[16..]    the names the declared keys belong to, in KEYS order: queue names, jids, entry
--          names, payload digests
-- then nb, and nb bids: the hashes of batches whose members are on the list, declared in KEYS after
--          the others (a member's run that ends here releases its hold on its own batch; a member
--          whose batch was not declared is left like any job, its need named "batch")
-- then "1" when the next key is the partition's outbox (the sharded layout: the batch hashes above
--          are stand-ins, and a member taken off the list gets a `batch_hold` entry there, its hold
--          released in the home slot by store/batch_ends.py `apply_hold`), else ""
-- then nm, and per batch member (or callback) on the list: its jid, nk, na, and na arguments of
--          batch_lib.lua's layout (store/batch_scripts.py `layout`, outcome "failed"), its nk keys
--          declared in KEYS after the others: a member found cancelled is counted in its batch as one
--          ended unrun in this same step (the one-slot layout); one whose layout was not declared is
--          left, its need named "member"
-- Returns {moved, failed, n, m, c, left, u, s, <n queue names no live process reads>..., <m keys of
-- the wrong type>..., <c raw jobs cancelled>..., <u needs as kind, name pairs>..., <raw jobs filed in
-- dead>...}, or {-1, 0, 0, 0, 0, 0, 0, 0} when the owner turned out to be alive. `s` of the `moved`
-- went to suspects lists. A job whose queue, suspects list, orphan counter or dead set has the wrong
-- type is kept on the list (failed) and that key named, for the key guard. A job needing a key the
-- caller didn't declare (the list changed after it read it) is left on the list untouched (left),
-- and what it needs named ("queue"/"counter"/"lock"/"digest"/"batch", name) for the caller's next pass. A
-- job `cogworker.cancel` was asked for (its jid in the cancel record) is taken off the list and
-- returned, not requeued: it was cancelled while its process was dying, and must not run again (the
-- caller counts it and releases its locks).
local now = redis_clock(ARGV[9])

if ARGV[3] ~= "" then
  if redis.call("EXISTS", KEYS[2]) == 1 then
    return {-1, 0, 0, 0, 0, 0, 0, 0}
  end
  -- A stamp that isn't a number counts as none: the presence key alone then decides.
  local last = tonumber(redis.call("HGET", KEYS[3], ARGV[2]) or "")
  if last and now - last <= tonumber(ARGV[3]) then
    return {-1, 0, 0, 0, 0, 0, 0, 0}
  end
end

-- name -> its declared key, for each kind (read_declared), and bid -> the batch's hash; the
-- partition's outbox (sharded) or nil; jid -> where a member's batch layout starts in KEYS and ARGV.
local declared
local hold_outbox, layouts = nil, {}
do
  local k, a
  declared, k, a = read_declared(8, 12)
  declared.batch = {}
  local nb = tonumber(ARGV[a] or "0")
  for i = 1, nb do
    declared.batch[ARGV[a + i]] = KEYS[k + i - 1]
  end
  k, a = k + nb, a + nb + 1
  if ARGV[a] == "1" then
    hold_outbox, k = KEYS[k], k + 1
  end
  for _ = 1, tonumber(ARGV[a + 1] or "0") do
    local nk, na = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    layouts[ARGV[a + 2]] = {kb = k, ab = a + 5}
    k, a = k + nk, a + 3 + na
  end
end
local needs = {queue = {}, counter = {}, lock = {}, digest = {}, batch = {}, member = {}}
local counting = ARGV[4] ~= ""
local suspect_at = tonumber(ARGV[10])
-- Alone: the list held one job when the process died. A list an earlier pass already took jobs from
-- (it left some for want of keys) was shared, whatever is left of it now.
local shared = ARGV[11] == "1" or redis.call("LLEN", KEYS[1]) > 1

local moved, failed, left, suspected = 0, 0, 0, 0
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

-- The declared hash of the batch the job is a member of, false when it is none, or nil (noted in
-- needs) when the caller did not declare it. store/job_keys.py reads `bid` the same way.
local function member_batch(job, jid)
  if not jid or not string.find(job, '"bid"', 1, true) then return false end
  local ok, decoded = pcall(cjson.decode, job)
  local bid = ok and type(decoded) == "table" and decoded["bid"]
  if type(bid) ~= "string" then return false end
  if not declared.batch[bid] then
    needs.batch[bid] = true
    return nil
  end
  return declared.batch[bid]
end

-- The run ends here (its process died inside a block on its own batch, or is stopping with the job
-- still in it): its hold on the batch goes, unless a later run took it over. The member is still
-- pending, so nothing is decided: its next run's end decides (docs/architecture.md "Batch holds").
local function release_run_hold(hash, jid)
  local field = "hold:run:" .. jid  -- not a key: a hash field
  if redis.pcall("HGET", hash, field) ~= KEYS[1] then return end  -- none, another run's, or wrong type
  redis.call("HDEL", hash, field)
  if (tonumber(redis.call("HGET", hash, "holds") or "0") or 0) > 0 then
    redis.call("HINCRBY", hash, "holds", -1)
  end
end

-- A member's run ended here in the sharded layout, where the batch's hash is out of reach: a
-- `batch_hold` entry in the partition's outbox has the home slot release `hold:run:<jid>` (only while
-- its value is still this list) and decide the batch if that was its last hold. One id per member
-- run's hold: a second death of the member overwrites it, and the hold then names the later list.
local function write_hold_release(job, jid)
  local ok, decoded = pcall(cjson.decode, job)
  if not ok or type(decoded) ~= "table" or type(decoded["bid"]) ~= "string" then return end
  local member = {bid = decoded["bid"], jid = jid}
  if type(decoded["bup"]) == "table" then member.bup = decoded["bup"] end
  local entry = cjson.encode({kind = "batch_hold", at = now, member = member, list = KEYS[1],
                              push = {}})  -- not a key: the entry's JSON
  local id = "hold:" .. decoded["bid"] .. ":" .. jid  -- not a key: an outbox entry id
  if type(redis.pcall("HSET", hold_outbox, id, entry)) ~= "number" then
    wrong[hold_outbox] = true  -- the hold then stays until the member's next end releases it
  end
end

-- A job cancelled while its process was dying ends here, unrun: a batch member (or callback) is
-- counted in its batch now, failed, as any member that ends unrun (batch_lib.lua), or it would stay
-- pending for ever. True when counted or not a member, nil when its layout was not declared (noted
-- in needs), false when one of its batch's keys has the wrong type (named in `wrong`).
local function end_cancelled_member(job, jid)
  if hold_outbox or (not string.find(job, '"bid"', 1, true) and not string.find(job, '"bcb"', 1, true)) then
    return true  -- the sharded layout never sees a cancel here (sharded_recovery.py)
  end
  local ok, decoded = pcall(cjson.decode, job)
  if not ok or type(decoded) ~= "table"
      or (type(decoded["bid"]) ~= "string" and type(decoded["bcb"]) ~= "table") then
    return true
  end
  local layout = layouts[jid]
  if not layout then
    needs.member[jid] = true
    return nil
  end
  local bad = batch_check(layout.kb, layout.ab)
  if bad then
    wrong[bad[2]] = true
    return false
  end
  batch_run(layout.kb, layout.ab)
  return true
end

-- Writes the job where it goes; returns "buried", "moved", "suspect", or nil when a key had the
-- wrong type (nothing written for it then).
local function place(job, found, orphaned)
  if counting and not shared and orphaned > tonumber(ARGV[6]) then
    -- A poison pill: it keeps killing its process, alone. Filed raw; the caller swaps in a proper
    -- entry.
    if type(redis.pcall("ZADD", KEYS[4], now, job)) ~= "number" then
      wrong[KEYS[4]] = true
      return nil
    end
    return "buried"
  end
  local target, outcome = found.queue, "moved"
  if orphaned >= suspect_at then
    target, outcome = found.suspects, "suspect"
  end
  local pushed = redis.pcall("RPUSH", target, job)
  if type(pushed) ~= "number" then
    wrong[target] = true
    return nil
  end
  return outcome
end

-- One pass over the list as it stands. The newest job is at the head: taking from the head and
-- pushing onto the popped end leaves the oldest job to be popped first. Each job is written where it
-- goes and only then taken off, so a script stopped by an error loses nothing (Redis keeps the
-- writes made before the error). A job that can't be written (a key of the wrong type) or whose keys
-- weren't declared goes to the back of the list -- pushed there before it is taken off the head --
-- for the next pass.
local count = redis.call("LLEN", KEYS[1])
for _ = 1, count do
  local job = redis.call("LINDEX", KEYS[1], 0)
  if not job then break end
  local queue, jid, pname = read_job(job, ARGV[1])
  local found = declared_keys_for(declared, needs, job, queue, jid, pname)
  local hold = member_batch(job, jid)
  if hold == nil then found = nil end
  local outcome
  local counted = false
  if not found then
    outcome = "left"
  else
    if found.lock then retake_running_lock(found.lock, jid, ARGV[8]) end
    if is_cancelled(jid) then
      local ended = end_cancelled_member(job, jid)
      if ended then
        outcome = "cancelled"
      elseif ended == nil then
        outcome = "left"
      end
    else
      local orphaned = count_orphaning(found.counter, counting, ARGV[5], wrong)
      counted = counting and orphaned ~= nil
      outcome = orphaned and place(job, found, orphaned)
    end
  end
  if outcome == nil or outcome == "left" then
    redis.call("RPUSH", KEYS[1], job)
    if counted then redis.call("DECR", found.counter) end
    if outcome == nil then failed = failed + 1 else left = left + 1 end
  elseif outcome == "buried" then
    buried[#buried + 1] = job
  elseif outcome == "cancelled" then
    cancelled[#cancelled + 1] = job  -- taken off the list below, written nowhere
  else
    moved = moved + 1
    if outcome == "suspect" then suspected = suspected + 1 end
    local seen = tonumber(redis.pcall("ZSCORE", KEYS[6], queue) or "")
    if not seen or seen < now - tonumber(ARGV[7]) then
      redis.pcall("SADD", KEYS[5], queue)
      unlisted[queue] = true
    end
  end
  if hold and outcome ~= nil and outcome ~= "left" then
    release_run_hold(hold, jid)
    if hold_outbox then write_hold_release(job, jid) end
  end
  redis.call("LPOP", KEYS[1])
end

local reply = {moved, failed, 0, 0, #cancelled, left, 0, suspected}
append_names(reply, unlisted, 3)
append_names(reply, wrong, 4)
for _, job in ipairs(cancelled) do reply[#reply + 1] = job end
append_needs(reply, needs, {"queue", "counter", "lock", "digest", "batch", "member"}, 7)
for _, job in ipairs(buried) do reply[#reply + 1] = job end
return reply
