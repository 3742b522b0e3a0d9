-- A concurrent limiter (api/limiter.py): at most ARGV[3] holders at once, each holding a lease that
-- ends by itself, so a holder that died (SIGKILL, a lost host) gives its slot back when its lease
-- runs out. Leases are scored on Redis's clock (TIME), so hosts with skewed clocks agree.
--
-- KEYS[1]  limiter:concurrent:<name>, zset: holder token -> its lease's end (ms, Redis's clock). A
--          token is "<limit>|<lease ms>|<host>:<pid>:<jid or ->:<serial>", so `cogworker limiter`
--          shows the limit without a key of its own.
-- ARGV[1]  "acquire" or "release"
-- ARGV[2]  acquire: the new holder's token; release: ARGV[2..n], every token to give back
-- ARGV[3]  the limit (acquire)
-- ARGV[4]  the lease in ms (acquire)
-- ARGV[5..n]  (acquire) tokens this process gave back since its last call, released first: a
--          worker's releases ride on its next acquire (api/limit_release.py)
-- Acquire returns {1, 0, holders} when the token now holds a slot, or {0, ms until the earliest
-- lease ends, holders} when every slot is held. Release returns {1, 0, 0}. Either returns
-- {"wrongtype", key} when the key is not a sorted set (nothing changed: the first command on it
-- is a pcall that fails on a wrong type before anything is written).
-- Redis's reply turns Lua numbers into integers: "holders" is a count, "ms" a whole number.
--
-- Expired leases are reclaimed in the same step, when they would turn a caller away. The key expires with its longest lease, so a
-- dynamic name (one per account, say) leaves nothing behind once idle.
local function wrongtype(reply)
  return type(reply) == "table" and reply.err ~= nil and string.find(reply.err, "WRONGTYPE", 1, true)
end
if ARGV[1] == "release" then
  for i = 2, #ARGV do
    if wrongtype(redis.pcall("ZREM", KEYS[1], ARGV[i])) then
      return {"wrongtype", KEYS[1]}
    end
  end
  return {1, 0, 0}
end
local held = redis.pcall("ZCARD", KEYS[1])
if wrongtype(held) then
  return {"wrongtype", KEYS[1]}
end
local seconds, micros = redis_clock()
local now = seconds * 1000 + math.floor(micros / 1000)
for i = 5, #ARGV do
  held = held - redis.call("ZREM", KEYS[1], ARGV[i])
end
local limit = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
-- Expired leases only matter once the limiter looks full: reclaimed then (a holder that died is
-- counted until its lease ends, and never after), which spares the common case a command.
if held >= limit then
  redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
  held = redis.call("ZCARD", KEYS[1])
end
if held >= limit then
  local first = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
  local wait = 0
  if first[2] then
    wait = math.max(0, tonumber(first[2]) - now)
  end
  return {0, wait, held}
end
redis.call("ZADD", KEYS[1], now + lease, ARGV[2])
-- The key lives as long as its longest lease (holders may use different leases under one name).
if redis.call("PTTL", KEYS[1]) < lease then
  redis.call("PEXPIRE", KEYS[1], lease)
end
return {1, 0, held + 1}
