-- Create a chain's group batch in the home slot (sharded layout, api/chain_group_outbox.py): the apply
-- step of the outbox entry that pushes the group's members. Run by whichever process moves the entry,
-- maybe more than once (a mover that died before its HDEL, a lost reply), always before the members'
-- push: the batch is created only when it doesn't exist yet, with every member already pending and no
-- block holding it, so it is created once and can't be decided before every member is in it.
--
-- KEYS[1]  the batch's hash
-- KEYS[2]  the batch's pending set
-- KEYS[3]  <prefix>batches (zset: bid -> created, for listing)
-- ARGV[1]  the bid
-- ARGV[2]  when the group was written (epoch seconds): the batch's created_at
-- ARGV[3]  entries older than this score are trimmed from <prefix>batches
-- ARGV[4]  n, the number of members; then their n jids
-- ARGV[5 + n ..]  field, value pairs for the batch's hash (its description and callbacks)
-- Returns 1 when the batch was created now, 0 when it existed already (nothing changed), or
-- {"wrongtype", key} (nothing changed: the entry stays for a later move).
local bad = first_wrong_type({{KEYS[1], "hash"}, {KEYS[2], "set"}, {KEYS[3], "zset"}})
if bad then
  return {"wrongtype", bad}
end
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
local members = tonumber(ARGV[4])
redis.call("HSET", KEYS[1], "created_at", ARGV[2], "holds", 0, "total", members, "done", 0, "failed", 0, "dead", 0)
for i = 5 + members, #ARGV, 2 do
  redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
end
for i = 5, 4 + members do
  redis.call("SADD", KEYS[2], ARGV[i])
end
redis.call("ZADD", KEYS[3], ARGV[2], ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", "(" .. ARGV[3])  -- not a key: a score bound
return 1
