-- Batch bookkeeping shared by the batch scripts (docs/architecture.md "Batches"): not run alone.
-- store/batch_scripts.py puts this text in front of each batch script, which calls batch_check
-- (before any write) and batch_run. Its keys are that script's (KEYS[1] ... as it lists them); both
-- functions read one layout of KEYS and ARGV starting at kb and ab:
--
-- KEYS[kb]      <prefix>queues (set of queue names: a callback's queue is listed like any push's)
-- KEYS[kb+1]    <prefix>wake (pub/sub channel: idle fetchers learn of a pushed callback)
-- KEYS[kb+2]    <prefix>schedule (a callback whose queue key was not given is filed here, due now)
-- KEYS[kb+3]    the hash of the batch this job is a callback of (when ARGV[ab+5] is not "")
-- KEYS[kb+4 ..] three keys per level, the job's own batch first, then its parent, ...: the batch's
--               hash, its pending set and its failures hash
-- KEYS[..]      the queue keys of the callbacks that may fire, in the order of their names below
-- ARGV[ab]      the member: a jid ("" when closing a `with` block)
-- ARGV[ab+1]    "ok", "failed" (ended unrun), "dead", or "close" (a `with` block ended)
-- ARGV[ab+2]    the error recorded for a failed or dead member
-- ARGV[ab+3]    now (epoch seconds)
-- ARGV[ab+4]    COGWORKER_BATCH_TTL_S: the batch's keys expire this long after it completed
-- ARGV[ab+5]    the callback kind ("success", "complete", "death") when the job is a callback, else ""
-- ARGV[ab+6]    L, the number of levels
-- ARGV[ab+7 ..] the bid of each level
-- ARGV[ab+7+L]  nq, the number of callback queues; then their names
--
-- A member counts once: it is counted when SREM takes it off its pending set, which happens at most
-- once per jid, so a member run twice after a crash, or retried and then successful, counts once. A
-- batch completes only when no block holds it (holds = 0) and its pending set is empty; the
-- HSETNX of completed_at makes that decision once, so its callbacks are pushed exactly once. A
-- callback becomes a member of the parent batch (in the same step), so a parent completes only
-- after its children and their callbacks.
--
-- Each hold is a field of the batch's hash, "hold:<name>", and `holds` counts them (docs/architecture.md
-- "Batch holds"): "hold:run:<jid>" is a member run's hold on its own batch (its value the in-progress
-- list the run is on), released by whatever ends that run; "hold:lease:<token>" is any other block's,
-- its value the lease's expiry. A member's end (ok, failed, dead) releases its run's hold here, in the
-- step that records the end; a block's own release is batch_close.lua's.

-- The sharded layout (docs/architecture.md "Batches in the sharded layout"): a home script that
-- decides sets batch_mode.outbox to the home outbox key before batch_run, and each callback the
-- decision fires is written there as an entry (`cb:<bid>:<kind>`, its payload and the partition
-- chosen when the batch was created) instead of pushed; batch_mode.fired lists the entries written,
-- for the script's reply. Left nil (the one-slot layout), callbacks are pushed as before.
local batch_mode = {outbox = nil, fired = {}}

local function batch_levels(kb, ab)
  local levels = tonumber(ARGV[ab + 6])
  return levels, tonumber(ARGV[ab + 7 + levels])
end

-- {"wrongtype", key} for the first key of the wrong type, or nil: checked before any write.
local function batch_check(kb, ab)
  local levels, nq = batch_levels(kb, ab)
  local wanted = {{KEYS[kb], "set"}, {KEYS[kb + 2], "zset"}}
  if ARGV[ab + 5] ~= "" then
    wanted[#wanted + 1] = {KEYS[kb + 3], "hash"}
  end
  for level = 1, levels do
    wanted[#wanted + 1] = {KEYS[kb + 1 + 3 * level], "hash"}
    wanted[#wanted + 1] = {KEYS[kb + 2 + 3 * level], "set"}
    wanted[#wanted + 1] = {KEYS[kb + 3 + 3 * level], "hash"}
  end
  for i = 1, nq do
    wanted[#wanted + 1] = {KEYS[kb + 3 + 3 * levels + i], "list"}
  end
  local bad = first_wrong_type(wanted)
  if bad then
    return {"wrongtype", bad}
  end
  return nil
end

local function count_of(hash, field)
  return tonumber(redis.call("HGET", hash, field) or "0") or 0
end

-- Let go of the hold `field` ("hold:<name>") on the batch `hash`: true when it was held. A hold
-- released twice (a lost reply, a run ended after its block closed) changes nothing the second time.
local function batch_release(hash, field)
  if redis.call("HDEL", hash, field) == 0 then
    return false
  end
  if count_of(hash, "holds") > 0 then
    redis.call("HINCRBY", hash, "holds", -1)
  end
  return true
end

-- Push the batch's callback of this kind, if it has one: onto its queue, as a member of the parent
-- batch (parent_hash, parent_pending) when there is one.
local function batch_fire(kb, bid, hash, kind, parent_hash, parent_pending, now, queue_keys)
  local text = redis.call("HGET", hash, "cb:" .. kind)  -- not a key: a hash field
  if not text then
    return
  end
  local queue = redis.call("HGET", hash, "cbq:" .. kind)  -- not a key: a hash field
  local jid = redis.call("HGET", hash, "cbjid:" .. kind)  -- not a key: a hash field
  if parent_pending then
    redis.call("SADD", parent_pending, jid)
    redis.call("HINCRBY", parent_hash, "total", 1)
  end
  -- The stored payload is a JSON object without its closing brace: the push time is added here.
  local body = text .. ',"enqueued_at":' .. now .. "}"  -- not a key: the payload's push time
  local queue_key = queue_keys[queue]
  if batch_mode.outbox then
    -- One entry per callback: its id names the batch and kind, so a second write overwrites it.
    local index = tonumber(redis.call("HGET", hash, "cbp:" .. kind) or "0") or 0  -- not a key: a field
    local id = "cb:" .. bid .. ":" .. kind  -- not a key: an outbox entry id
    local entry = cjson.encode({kind = "batch_cb", at = tonumber(now), bid = bid, cb = kind,
                                push = {{index, body}}})  -- not a key: the entry's JSON
    redis.call("HSET", batch_mode.outbox, id, entry)
    batch_mode.fired[#batch_mode.fired + 1] = id
  elseif queue_key then
    redis.call("LPUSH", queue_key, body)
    redis.call("SADD", KEYS[kb], queue)
    redis.call("PUBLISH", KEYS[kb + 1], queue)
  else
    redis.call("ZADD", KEYS[kb + 2], now, body)
  end
  redis.call("HSET", hash, "cbstate:" .. kind, "enqueued")  -- not a key: a hash field
end

-- Record the member's end (or a block's close) and decide, level by level, what it completes.
local function batch_run(kb, ab)
  local member, outcome, err = ARGV[ab], ARGV[ab + 1], ARGV[ab + 2]
  local now, ttl, kind = ARGV[ab + 3], tonumber(ARGV[ab + 4]), ARGV[ab + 5]
  local levels, nq = batch_levels(kb, ab)
  local queue_keys = {}
  for i = 1, nq do
    queue_keys[ARGV[ab + 7 + levels + i]] = KEYS[kb + 3 + 3 * levels + i]
  end
  if kind ~= "" and outcome ~= "close" and redis.call("EXISTS", KEYS[kb + 3]) == 1 then
    local state = "done"
    if outcome ~= "ok" then
      state = outcome
    end
    redis.call("HSET", KEYS[kb + 3], "cbstate:" .. kind, state)  -- not a key: a hash field
  end
  for level = 1, levels do
    local hash, pending, failures = KEYS[kb + 1 + 3 * level], KEYS[kb + 2 + 3 * level], KEYS[kb + 3 + 3 * level]
    if outcome == "close" then
      -- batch_close.lua released a hold before calling: only the decision is left.
      if redis.call("EXISTS", hash) == 0 then
        return
      end
    else
      -- The member's run ends here: its hold on its own batch (a block it never closed) goes too.
      local run_hold = "hold:run:" .. member  -- not a key: a hash field
      local released = level == 1 and member ~= "" and batch_release(hash, run_hold)
      local counted = redis.call("SREM", pending, member) == 1
      if not counted and not released then
        return  -- counted before (a second run), or not a member: nothing changes
      end
      if counted then
        redis.call("HINCRBY", hash, "done", 1)
      end
      if counted and outcome ~= "ok" then
        redis.call("HINCRBY", hash, "failed", 1)
        if outcome == "dead" then
          redis.call("HINCRBY", hash, "dead", 1)
        end
        -- The first 1,000 failures keep their error; the counts keep counting.
        if redis.call("HLEN", failures) < 1000 then
          redis.call("HSET", failures, member, err)
        end
      end
    end
    if count_of(hash, "holds") > 0 then
      return  -- a `with` block is still pushing: nothing is decided before it closes
    end
    local parent_hash, parent_pending = nil, nil
    if level < levels then
      parent_hash, parent_pending = KEYS[kb + 4 + 3 * level], KEYS[kb + 5 + 3 * level]
    end
    local dead = count_of(hash, "dead")
    if dead > 0 and redis.call("HSETNX", hash, "fired:death", now) == 1 then
      batch_fire(kb, ARGV[ab + 6 + level], hash, "death", parent_hash, parent_pending, now, queue_keys)
    end
    if redis.call("SCARD", pending) > 0 or redis.call("HSETNX", hash, "completed_at", now) == 0 then
      return
    end
    local failed = count_of(hash, "failed")
    if failed == 0 then
      batch_fire(kb, ARGV[ab + 6 + level], hash, "success", parent_hash, parent_pending, now, queue_keys)
    end
    batch_fire(kb, ARGV[ab + 6 + level], hash, "complete", parent_hash, parent_pending, now, queue_keys)
    redis.call("EXPIRE", hash, ttl)
    redis.call("EXPIRE", failures, ttl)
    if not parent_hash then
      return
    end
    -- This batch is one member of its parent: "b:<bid>", ended as its worst member did.
    member = "b:" .. ARGV[ab + 6 + level]  -- not a key: the member name of a child batch
    err = failed .. " of " .. count_of(hash, "total") .. " members failed"  -- not a key: an error text
    outcome = "ok"
    if dead > 0 then
      outcome = "dead"
    elseif failed > 0 then
      outcome = "failed"
    end
  end
end
