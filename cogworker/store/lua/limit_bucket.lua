-- A token bucket (api/limiter.py): ARGV[1] tokens per ARGV[2] ms flow in, up to ARGV[3] held; each
-- pass takes one. Time is Redis's (TIME), never a client's, so skewed hosts share one rate.
--
-- KEYS[1]  limiter:bucket:<name>, hash: tokens (a fraction), at (ms of that count), rate, per_ms, burst
-- ARGV[1]  tokens added per period (the rate)
-- ARGV[2]  the period in ms
-- ARGV[3]  the bucket's size (the burst)
-- Returns {1, 0, tokens left} when this call takes a token, {0, ms until one is there, 0} when the
-- bucket is empty (nothing written), or {"wrongtype", key} (nothing changed).
--
-- The key expires when the bucket would be full again: a missing key is a full bucket, so an idle
-- name costs nothing and loses nothing.
if is_wrong_type(KEYS[1], "hash") then
  return {"wrongtype", KEYS[1]}
end
local rate = tonumber(ARGV[1])
local per = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local per_ms = rate / per
local seconds, micros = redis_clock()
local now = seconds * 1000 + micros / 1000
local state = redis.call("HMGET", KEYS[1], "tokens", "at")
local tokens = burst
if state[1] and state[2] then
  tokens = math.min(burst, tonumber(state[1]) + math.max(0, now - tonumber(state[2])) * per_ms)
end
if tokens < 1 then
  return {0, math.ceil((1 - tokens) / per_ms), 0}
end
tokens = tokens - 1
redis.call("HSET", KEYS[1], "tokens", tostring(tokens), "at", tostring(now), "rate", rate, "per_ms", per, "burst", burst)
redis.call("PEXPIRE", KEYS[1], math.max(1, math.ceil((burst - tokens) / per_ms)))
return {1, 0, math.floor(tokens)}
