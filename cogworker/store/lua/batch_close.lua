-- Release a hold on a batch and, if nothing else holds it and no member is pending, complete it (and
-- its parents), after batch_lib.lua. A block releases its own hold when it ends; the poller releases
-- a lease that lapsed (its block's process died or lost Redis); `cogworker batch release` releases
-- every hold (docs/architecture.md "Batch holds").
--
-- KEYS[1]  <prefix>batch-leases (zset: "<bid> <token>" -> the lease's expiry, epoch seconds)
-- KEYS[2 ..], ARGV[4 ..]  the batch layout of batch_lib.lua, with kb = 2 and ab = 4 and outcome
--          "close" (its first bid is the held batch's)
-- ARGV[1]  the hold's name: "run:<jid>", "lease:<token>", or "*" for every hold the batch has
-- ARGV[2]  when to release it: "any"; "owner" (a run's hold, only while its value is ARGV[3]: the
--          in-progress list of the run that took it, not a later run's that took it over); "lapsed"
--          (a lease, only if its expiry is at or before ARGV[3]: not one its block renewed since)
-- ARGV[3]  the owner, or now (epoch seconds), or ""
-- Returns how many holds it released (0: none was held, as when a release is repeated after a lost
-- reply: nothing changes), or {"wrongtype", key} (nothing changed).
if is_wrong_type(KEYS[1], "zset") then
  return {"wrongtype", KEYS[1]}
end
local wrong = batch_check(2, 4)
if wrong then
  return wrong
end
local hash, bid = KEYS[6], ARGV[4 + 7]
local name, when, bound = ARGV[1], ARGV[2], ARGV[3]

-- A lease's entry in the lease zset goes with its hold (or with a hold already gone).
local function forget_lease(field)
  local token = string.match(field, "^hold:lease:(.+)$")
  if token then
    redis.call("ZREM", KEYS[1], bid .. " " .. token)  -- not a key: a zset member
  end
end

local released = 0
if name == "*" then
  local fields = redis.call("HKEYS", hash)
  for _, field in ipairs(fields) do
    if string.sub(field, 1, 5) == "hold:" then
      redis.call("HDEL", hash, field)
      forget_lease(field)
      released = released + 1
    end
  end
  -- A count with no named hold behind it (left by a release that was never made): released too.
  released = math.max(released, count_of(hash, "holds"))
  if redis.call("EXISTS", hash) == 1 then
    redis.call("HSET", hash, "holds", 0)
  end
else
  local field = "hold:" .. name  -- not a key: a hash field
  local value = redis.call("HGET", hash, field)
  local due = value ~= false
  if due and when == "owner" then
    due = value == bound
  elseif due and when == "lapsed" then
    due = (tonumber(value) or 0) <= tonumber(bound)
  end
  -- A lease renewed since the poller read its expiry keeps its entry (with the renewed score).
  if due or value == false then
    forget_lease(field)
  end
  if due and batch_release(hash, field) then
    released = 1
  end
end
if released > 0 then
  batch_run(2, 4)
end
return released
