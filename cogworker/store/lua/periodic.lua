-- One slot of a periodic entry, handled once across every process and host: the slot is claimed and
-- (in "enqueue" mode) its job pushed in this one atomic step. Claimed and pushed separately, a
-- process dying in between would leave the slot claimed and its job never run.
--
-- Two records say a slot was handled: the slot's own claim key (SET NX, with a TTL; its value says
-- what became of it) and `last_slot` in the entry's registration, which outlives the claim keys
-- (a weekly entry's most recent slot stays the most recent for a week).
--
-- KEYS[1]  the slot's claim key (cogworker:periodic:slot:<name>:<slot>)
-- KEYS[2]  cogworker:periodic:entries (hash: entry name -> registration JSON)
-- KEYS[3]  the entry's running lock (cogworker:periodic:running:<name>)
-- KEYS[4]  the job's queue key
-- KEYS[5]  cogworker:queues
-- KEYS[6]  cogworker:wake (pub/sub: idle fetchers reading several queues wait on it)
-- ARGV[1]  entry name
-- ARGV[2]  mode: "baseline" (this process's first look: refresh the registration; an entry seen
--          for the first time records this slot as handled, so a new entry never runs a slot
--          from before it existed), "enqueue" (push the job), "missed" (too late: record it only),
--          "stopped" (a client middleware stopped the push, e.g. a unique job's duplicate: record it
--          only, so that one process says so rather than every one)
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
-- Returns {outcome, the last slot handled before this one (or -1), running lock holder (or "")}.
-- outcome: "taken" (this slot or a later one was already handled), "baseline", "known" (baseline
-- mode, the entry was already registered), "enqueued", "running" (skipped: the previous run still
-- holds the running lock), "missed", "stopped", or "wrongtype" (a key of the wrong type; nothing
-- written).
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
local bad = first_wrong_type({{KEYS[1], "string"}, {KEYS[3], "string"}, {KEYS[4], "list"}, {KEYS[5], "set"}})
if bad then
  return {"wrongtype", -1, bad}
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
  return {mode, last or -1, ""}
end
if holder ~= "" then
  return {"running", last or -1, holder}
end
if ARGV[10] == "1" then
  redis.call("SET", KEYS[3], ARGV[7], "EX", ARGV[11])
end
redis.call("LPUSH", KEYS[4], ARGV[8])
redis.call("SADD", KEYS[5], ARGV[9])
redis.call("PUBLISH", KEYS[6], ARGV[9])
return {"enqueued", last or -1, ""}
