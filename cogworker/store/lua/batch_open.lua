-- Create a batch, hold an open one, renew a hold's lease, or register members about to be pushed to it.
--
-- KEYS[1]  the batch's hash
-- KEYS[2]  the batch's pending set
-- KEYS[3]  <prefix>batches (zset: bid -> created, for listing)
-- KEYS[4]  the parent batch's hash (KEYS[1] again when there is none)
-- KEYS[5]  the parent batch's pending set (KEYS[2] again when there is none)
-- KEYS[6]  <prefix>batch-leases (zset: "<bid> <token>" -> a lease's expiry, read by the poller)
-- ARGV[1]  "new" (create the batch, held by its `with` block), "hold" (one more block holds it),
--          "renew" (push a held lease's expiry on) or "add" (register members: the jids in ARGV[8 ..])
-- ARGV[2]  now (epoch seconds)
-- ARGV[3]  the bid
-- ARGV[4]  ("new") the parent's bid, or ""
-- ARGV[5]  ("new") entries older than this score are trimmed from <prefix>batches
-- ARGV[6]  ("new", "hold", "renew") the hold's name: "run:<jid>" (a member run's hold on its own
--          batch) or "lease:<token>" (any other block's)
-- ARGV[7]  the hold's value: a run's in-progress list, or a lease's expiry (epoch seconds)
-- ARGV[8 ..]  ("new") field, value pairs for the batch's hash; ("add") the jids
-- Returns 1, 0 when the batch (or, for "new", its parent) is gone or complete, or ("renew") the hold
-- is no longer held (nothing changed), or {"wrongtype", key}.
--
-- Members are registered before they are pushed, so none can end before it is counted; a batch is
-- held while a block pushes to it, so it can't complete between two of its pushes. A run's hold taken
-- again by a later run of the same member (its first run died before releasing it) changes owner and
-- stays one hold: holds are idempotent per member.
local bad = first_wrong_type({{KEYS[1], "hash"}, {KEYS[2], "set"}, {KEYS[3], "zset"}, {KEYS[4], "hash"},
                              {KEYS[5], "set"}, {KEYS[6], "zset"}})
if bad then
  return {"wrongtype", bad}
end
local function open(hash)
  return redis.call("EXISTS", hash) == 1 and redis.call("HEXISTS", hash, "completed_at") == 0
end
local mode = ARGV[1]
local field = "hold:" .. ARGV[6]  -- not a key: a hash field
-- A lease's entry in the lease zset, read by the poller to release the hold once it lapsed.
local function lease_entry()
  local token = string.match(ARGV[6], "^lease:(.+)$")
  if token then
    redis.call("ZADD", KEYS[6], ARGV[7], ARGV[3] .. " " .. token)  -- not a key: a zset member
  end
end
if mode == "renew" then
  if redis.call("HEXISTS", KEYS[1], field) == 0 then
    return 0  -- released meanwhile (lapsed, or by `cogworker batch release`): not taken again
  end
  redis.call("HSET", KEYS[1], field, ARGV[7])
  lease_entry()
  return 1
end
if mode == "new" then
  local parent = ARGV[4]
  if parent ~= "" and not open(KEYS[4]) then
    return 0
  end
  redis.call("HSET", KEYS[1], "created_at", ARGV[2], "holds", 1, "total", 0, "done", 0, "failed", 0, "dead", 0)
  redis.call("HSET", KEYS[1], field, ARGV[7])
  lease_entry()
  for i = 8, #ARGV, 2 do
    redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
  end
  redis.call("ZADD", KEYS[3], ARGV[2], ARGV[3])
  redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", "(" .. ARGV[5])  -- not a key: a score bound
  if parent ~= "" then
    redis.call("SADD", KEYS[5], "b:" .. ARGV[3])  -- not a key: the member name of a child batch
    redis.call("HINCRBY", KEYS[4], "total", 1)
  end
  return 1
end
if not open(KEYS[1]) then
  return 0
end
if mode == "hold" then
  if redis.call("HSET", KEYS[1], field, ARGV[7]) == 1 then
    redis.call("HINCRBY", KEYS[1], "holds", 1)
  end
  lease_entry()
  return 1
end
local added = 0
for i = 8, #ARGV do
  added = added + redis.call("SADD", KEYS[2], ARGV[i])
end
redis.call("HINCRBY", KEYS[1], "total", added)
return 1
