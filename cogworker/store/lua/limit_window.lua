-- A window limiter (api/limiter.py): at most ARGV[1] passes per fixed window of ARGV[2] ms. Windows
-- are aligned to multiples of their length on Redis's clock (TIME), the same for every host.
--
-- KEYS[1]  limiter:window:<name>, hash: window (its index), count (passes in it), limit, per_ms
-- ARGV[1]  the limit
-- ARGV[2]  the window's length in ms
-- Returns {1, 0, count} when this call passes (counted), {0, ms until the next window, count} when
-- the window is full (nothing written), or {"wrongtype", key} (nothing changed).
--
-- The key expires when its window ends: an idle name costs nothing, and a new window starts at 0.
if is_wrong_type(KEYS[1], "hash") then
  return {"wrongtype", KEYS[1]}
end
local limit = tonumber(ARGV[1])
local per = tonumber(ARGV[2])
local seconds, micros = redis_clock()
local now = seconds * 1000 + math.floor(micros / 1000)
local window = math.floor(now / per)
local left = (window + 1) * per - now
local state = redis.call("HMGET", KEYS[1], "window", "count")
local count = 0
if tonumber(state[1]) == window then
  count = tonumber(state[2]) or 0
end
if count >= limit then
  return {0, left, count}
end
redis.call("HSET", KEYS[1], "window", window, "count", count + 1, "limit", limit, "per_ms", per)
redis.call("PEXPIRE", KEYS[1], math.max(1, left))
return {1, 0, count + 1}
