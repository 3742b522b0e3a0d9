-- One slot of a periodic entry, handled once across every process and host: the slot is claimed and
-- (in "enqueue" mode) its job pushed in this one atomic step. Claimed and pushed separately, a
-- process dying in between would leave the slot claimed and its job never run.
--
-- Two records say a slot was handled: the slot's own claim key (SET NX, with a TTL; its value says
-- what became of it) and `last_slot` in the entry's registration, which outlives the claim keys
-- (a weekly entry's most recent slot stays the most recent for a week). The entry's run history
-- (KEYS[7]) is what the Web UI and `cogworker periodic list` show of it, not what decides a claim.
--
-- KEYS[1]  the slot's claim key (cogworker:periodic:slot:<name>:<slot>)
-- KEYS[2]  cogworker:periodic:entries (hash: entry name -> registration JSON)
-- KEYS[3]  the entry's running lock (cogworker:periodic:running:<name>)
-- KEYS[4]  the job's queue key; in the sharded layout the home outbox (cogworker:{home}:outbox)
-- KEYS[5]  cogworker:queues
-- KEYS[6]  cogworker:wake (pub/sub: idle fetchers reading several queues wait on it); not used in
--          the sharded layout
-- KEYS[7]  the entry's run history (cogworker:periodic:runs:<name>, list, newest first): one JSON
--          record per slot handled, written here with the claim, so a reply lost after the script
--          ran can't record a slot twice, and a script that never ran records nothing
-- KEYS[8]  cogworker:periodic:paused (set of entry names an operator paused)
-- ARGV[1]  entry name
-- ARGV[2]  mode: "baseline" (this process's first look: refresh the registration; an entry seen
--          for the first time records this slot as handled, so a new entry never runs a slot
--          from before it existed), "enqueue" (push the job), "missed" (too late: record it only),
--          "stopped" (a client middleware stopped the push, e.g. a unique job's duplicate: record it
--          only, so that one process says so rather than every one), "paused" (the ticker saw the
--          entry paused: record the slot as paused if it still is, else claim nothing)
-- ARGV[3]  the slot (epoch seconds)
-- ARGV[4]  the claim key's TTL, seconds
-- ARGV[5]  the registration, JSON of scalars only (it is decoded and re-encoded here, and cjson
--          would turn an empty list into an object); the job's arguments ride in it as one JSON
--          string ("arguments"), which this script passes through untouched
-- ARGV[6]  now (epoch seconds), recorded as first_seen for a new entry
-- ARGV[7]  the job's jid
-- ARGV[8]  the job's payload
-- ARGV[9]  the job's queue name
-- ARGV[10] "1" when the entry is until_executed: no new run while the running lock is held
-- ARGV[11] the running lock's TTL, seconds
-- ARGV[12] how many records the run history keeps
-- ARGV[13] the sharded layout only (absent in the one-slot layout): the outbox entry pushing the
--          job (store/outbox.py encode, kind periodic_push), written to KEYS[4] instead of the push:
--          the job's queue partition is in another slot, out of this script's reach
-- ARGV[14] the sharded layout only: the entry's id (periodic:<name>:<slot>)
-- Returns {outcome, the last slot handled before this one (or -1), running lock holder (or "")}.
-- outcome: "taken" (this slot or a later one was already handled), "baseline", "known" (baseline
-- mode, the entry was already registered), "enqueued", "running" (skipped: the previous run still
-- holds the running lock), "missed", "stopped", "paused" (in any mode but baseline: the entry is
-- in the paused set, the slot is recorded as paused and nothing pushed), "resumed" ("paused" mode
-- only: the entry is no longer paused; nothing written), or "wrongtype" (a key of the wrong type;
-- nothing written). An "enqueued" reply in the sharded layout has a fourth element: the id of the
-- outbox entry written, for the caller to move (api/periodic_outbox.py).
local outboxed = ARGV[13] ~= nil
if is_wrong_type(KEYS[2], "hash") then
  return {"wrongtype", -1, KEYS[2]}
end
local mode, slot = ARGV[2], tonumber(ARGV[3])
local registration = cjson.decode(ARGV[5])
local existing = {}
local stored = redis.call("HGET", KEYS[2], ARGV[1])
if stored then
  local ok, decoded = pcall(cjson.decode, stored)
  if ok and type(decoded) == "table" then existing = decoded end
end
local last = tonumber(existing["last_slot"])
registration["first_seen"] = tonumber(existing["first_seen"]) or tonumber(ARGV[6])
registration["last_slot"] = last

local function save()
  redis.call("HSET", KEYS[2], ARGV[1], cjson.encode(registration))
end

if mode == "baseline" then
  if last then
    save()
    return {"known", last, ""}
  end
  registration["last_slot"] = slot
  save()
  return {"baseline", -1, ""}
end

if last and last >= slot then
  return {"taken", last, ""}
end
-- Every key written below is checked first: Redis keeps what a script wrote before an error, so a
-- slot claimed before a failed push would never run.
local bad = first_wrong_type({
  {KEYS[1], "string"}, {KEYS[3], "string"}, {KEYS[4], outboxed and "hash" or "list"}, {KEYS[5], "set"},
  {KEYS[7], "list"}, {KEYS[8], "set"},
})
if bad then
  return {"wrongtype", -1, bad}
end

local function record(outcome, jid, holder)
  local run = {slot = slot, outcome = outcome, at = tonumber(ARGV[6]), previous = last or -1}
  if jid ~= "" then run["jid"] = jid end
  if holder ~= "" then run["holder"] = holder end
  redis.call("LPUSH", KEYS[7], cjson.encode(run))
  redis.call("LTRIM", KEYS[7], 0, tonumber(ARGV[12]) - 1)
end

-- Read here, with the claim: a pause that lands between the ticker's own look and this script
-- still stops the push, and a paused slot counts as handled, so a resume never catches up a burst.
if redis.call("SISMEMBER", KEYS[8], ARGV[1]) == 1 then
  if not redis.call("SET", KEYS[1], "paused", "NX", "EX", ARGV[4]) then
    return {"taken", last or -1, ""}
  end
  registration["last_slot"] = slot
  save()
  record("paused", "", "")
  return {"paused", last or -1, ""}
elseif mode == "paused" then
  return {"resumed", last or -1, ""}
end

local claim, holder = ARGV[7], ""
if mode == "missed" then
  claim = "missed"
elseif mode == "stopped" then
  claim = "stopped by a client middleware"
elseif ARGV[10] == "1" then
  holder = redis.call("GET", KEYS[3]) or ""
  if holder ~= "" then claim = "skipped, still running: " .. holder end
end
if not redis.call("SET", KEYS[1], claim, "NX", "EX", ARGV[4]) then
  return {"taken", last or -1, ""}
end
registration["last_slot"] = slot
save()
if mode == "missed" or mode == "stopped" then
  record(mode, "", "")
  return {mode, last or -1, ""}
end
if holder ~= "" then
  record("running", "", holder)
  return {"running", last or -1, holder}
end
if ARGV[10] == "1" then
  redis.call("SET", KEYS[3], ARGV[7], "EX", ARGV[11])
end
if outboxed then
  -- The mover pushes it to its partition (with its marker, so once) and lists the queue there.
  redis.call("HSET", KEYS[4], ARGV[14], ARGV[13])
  record("enqueued", ARGV[7], "")
  return {"enqueued", last or -1, "", ARGV[14]}
end
redis.call("LPUSH", KEYS[4], ARGV[8])
redis.call("SADD", KEYS[5], ARGV[9])
redis.call("PUBLISH", KEYS[6], ARGV[9])
record("enqueued", ARGV[7], "")
return {"enqueued", last or -1, ""}
