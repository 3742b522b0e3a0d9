-- Cancelling one job (cogworker/ops/cancel.py). Three operations:
--
-- "record"  note the cancel in the cancel record (a zset jid -> Redis's clock), trimmed by age and
--           size; every worker process reads it about once a second and won't start (or flags, or
--           cancels) a job it names. Written before the job is searched for, so a job that moves
--           while it is searched for (fetched, requeued after a crash) is still stopped.
-- "forget"  take the jid off the record again (the job turned out finished: nothing to stop).
-- "remove"  take the job off the queue or set it waits in, by its exact payload, so it never runs;
--           only if it is still there (0 otherwise: it moved, and the caller looks again). Then, in
--           the same step, the record's entry goes (nothing is left to stop), the locks it held are
--           released when they are still its own (its unique claim, a periodic entry's running
--           lock), and a status hash, if it has one, says "cancelled".
--
-- Every key is checked for its type before anything is written: a key of the wrong type answers
-- {"wrongtype", key} with nothing changed (the key guard moves it aside).
--
-- KEYS[1]  cogworker:cancels
-- KEYS[2]  remove: the queue (list) or set (zset) the job waits in
-- KEYS[3]  remove: the jid's status hash
-- KEYS[4..] remove: the locks the job holds (strings holding its jid)
-- ARGV[1]  the jid
-- ARGV[2]  the operation: "record", "forget" or "remove"
-- ARGV[3]  record: seconds an entry is kept; remove: "l" (KEYS[2] is a list) or "z" (a zset)
-- ARGV[4]  record: entries kept at most; remove: the payload exactly as stored
-- ARGV[5]  the caller's clock (epoch seconds), used only if TIME is refused
-- Returns 1 when done, 0 (remove) when the payload wasn't there.
if redis.replicate_commands then redis.replicate_commands() end

local now = tonumber(ARGV[5])
local ok_time, time = pcall(redis.call, "TIME")
if ok_time then now = tonumber(time[1]) + tonumber(time[2]) / 1000000 end

local function wrong(key, want)
  local kind = redis.call("TYPE", key)["ok"]
  return kind ~= want and kind ~= "none"
end

local jid, op = ARGV[1], ARGV[2]
if wrong(KEYS[1], "zset") then
  return {"wrongtype", KEYS[1]}
end

if op == "record" then
  redis.call("ZADD", KEYS[1], now, jid)
  redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", "(" .. (now - tonumber(ARGV[3])))
  redis.call("ZREMRANGEBYRANK", KEYS[1], 0, -(tonumber(ARGV[4]) + 1))
  return 1
end
if op == "forget" then
  redis.call("ZREM", KEYS[1], jid)
  return 1
end

local is_list = ARGV[3] == "l"
if wrong(KEYS[2], is_list and "list" or "zset") then
  return {"wrongtype", KEYS[2]}
end
if wrong(KEYS[3], "hash") then
  return {"wrongtype", KEYS[3]}
end
for i = 4, #KEYS do
  if wrong(KEYS[i], "string") then
    return {"wrongtype", KEYS[i]}
  end
end

local removed
if is_list then
  removed = redis.call("LREM", KEYS[2], 1, ARGV[4])
else
  removed = redis.call("ZREM", KEYS[2], ARGV[4])
end
if removed == 0 then
  return 0
end
redis.call("ZREM", KEYS[1], jid)
for i = 4, #KEYS do
  if redis.call("GET", KEYS[i]) == jid then
    redis.call("DEL", KEYS[i])
  end
end
if redis.call("EXISTS", KEYS[3]) == 1 then
  redis.call("HSET", KEYS[3], "status", "cancelled", "updated_at", tostring(now))
end
return 1
