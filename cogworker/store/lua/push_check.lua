-- After a push whose reply was lost: did the write attempt write its jobs? Each job's marker
-- (push_batch.lua) holds the token of the attempt that wrote it. A marker that is free is fenced off
-- for this attempt in the same step ("x:<token>"), so if the push is still on its way (delayed in
-- the network, Redis stalled) it writes nothing when it arrives, and the answer stays true.
--
-- KEYS[1 ..]  the jobs' `pushed:<jid>` markers
-- ARGV[1]     the write attempt's token
-- ARGV[2]     how long a fence lives, ms
-- Returns one code per marker: 1 written by this attempt, 2 written by an earlier one (the same jid
-- pushed before), 0 not written (fenced off now); or {"wrongtype", key}.
local attempt, ttl = ARGV[1], ARGV[2]
for _, key in ipairs(KEYS) do
  if is_wrong_type(key, "string") then
    return {"wrongtype", key}
  end
end
local fenced = "x:" .. attempt  -- not a key: the value a fenced-off marker holds
local codes = {}
for i, key in ipairs(KEYS) do
  local held = redis.call("GET", key)
  if held == attempt then
    codes[i] = 1
  elseif held and string.sub(held, 1, 2) ~= "x:" then
    codes[i] = 2
  else
    redis.call("SET", key, fenced, "PX", ttl)
    codes[i] = 0
  end
end
return codes
