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
--           lock), a status hash, if it has one, says "cancelled", the job is counted cancelled,
--           and the cancel's answer is kept under `cancelled:<jid>`: a caller whose reply was lost,
--           or who asks again, gets the same answer, and the job is counted once.
--
-- Every key is checked for its type before anything is written: a key of the wrong type answers
-- {"wrongtype", key} with nothing changed (the key guard moves it aside).
--
-- KEYS[1]  cogworker:cancels
-- KEYS[2]  remove: the queue (list) or set (zset) the job waits in
-- KEYS[3]  remove: the jid's status hash
-- KEYS[4]  remove: the jid's `cancelled:<jid>` answer (a string)
-- KEYS[5]  remove: stat:cancelled
-- KEYS[6]  remove: stat:cancelled:<today, UTC>
-- KEYS[7..] remove: the locks the job holds (strings holding its jid)
-- ARGV[1]  the jid
-- ARGV[2]  the operation: "record", "forget" or "remove"
-- ARGV[3]  record: seconds an entry is kept; remove: "l" (KEYS[2] is a list) or "z" (a zset)
-- ARGV[4]  record: entries kept at most; remove: the payload exactly as stored
-- ARGV[5]  the caller's clock (epoch seconds), used only if TIME is refused
-- ARGV[6]  remove: the answer to keep (JSON), and ARGV[7] for how many seconds
-- ARGV[8]  remove: how many seconds the day's counter is kept
-- Returns 1 when done, 0 (remove) when the payload wasn't there; {"uncounted", key} when removed
-- but a counter has the wrong type (the count is the only thing missing).
local seconds, micros = redis_clock(ARGV[5])
local now = seconds + micros / 1000000

local jid, op = ARGV[1], ARGV[2]
if is_wrong_type(KEYS[1], "zset") then
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
local wanted = {{KEYS[2], is_list and "list" or "zset"}, {KEYS[3], "hash"}, {KEYS[4], "string"}}
for i = 7, #KEYS do
  wanted[#wanted + 1] = {KEYS[i], "string"}
end
local bad = first_wrong_type(wanted)
if bad then
  return {"wrongtype", bad}
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
for i = 7, #KEYS do
  if redis.call("GET", KEYS[i]) == jid then
    redis.call("DEL", KEYS[i])
  end
end
if redis.call("EXISTS", KEYS[3]) == 1 then
  redis.call("HSET", KEYS[3], "status", "cancelled", "updated_at", tostring(now))
end
redis.call("SET", KEYS[4], ARGV[6], "EX", ARGV[7])
-- A counter of the wrong type must not undo the cancel: the count alone is missed, and reported.
local uncounted = nil
for i, counter in ipairs({KEYS[5], KEYS[6]}) do
  local counted = redis.pcall("INCRBY", counter, 1)
  if type(counted) == "table" and counted.err then
    uncounted = uncounted or counter
  elseif i == 2 then
    redis.call("EXPIRE", counter, ARGV[8])
  end
end
if uncounted then
  return {"uncounted", uncounted}
end
return 1
