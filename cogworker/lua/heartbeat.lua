-- One heartbeat: presence, last beat on Redis's own clock, registries, live-queue stamps, the jobs
-- running right now, and any remote commands waiting for this process.
--
-- KEYS[1]  the presence hash (cogworker:process:<identity>)
-- KEYS[2]  cogworker:processes
-- KEYS[3]  cogworker:last-beat
-- KEYS[4]  cogworker:inprogress-identities ("" field: only for reliable-fetch processes)
-- KEYS[5]  cogworker:live-queues
-- KEYS[6]  the work hash (cogworker:work:<identity>)
-- KEYS[7]  the remote-command list (cogworker:signals:<identity>)
-- ARGV[1]  identity
-- ARGV[2]  presence TTL in seconds
-- ARGV[3]  "1" if this process keeps an in-progress list
-- ARGV[4]  process info (JSON)
-- ARGV[5]  busy threads
-- ARGV[6]  RSS bytes
-- ARGV[7]  "1" when quiet
-- ARGV[8]  number of queue names that follow
-- ARGV[9..8+n]   queue names
-- ARGV[9+n..]    the running jobs as pairs: thread key, JSON
-- Returns {now, <remote commands>...}.
if redis.replicate_commands then redis.replicate_commands() end
local now = tonumber(redis.call("TIME")[1])
local id = ARGV[1]
redis.call("HSET", KEYS[1], "info", ARGV[4], "busy", ARGV[5], "rss", ARGV[6], "quiet", ARGV[7], "beat", now)
redis.call("EXPIRE", KEYS[1], ARGV[2])
redis.call("SADD", KEYS[2], id)
redis.call("HSET", KEYS[3], id, now)
if ARGV[3] == "1" then
  redis.call("SADD", KEYS[4], id)
end
local nq = tonumber(ARGV[8])
for i = 9, 8 + nq do
  redis.call("ZADD", KEYS[5], now, ARGV[i])
end
redis.call("DEL", KEYS[6])
local first = 9 + nq
if #ARGV >= first then
  redis.call("HSET", KEYS[6], unpack(ARGV, first))
  redis.call("EXPIRE", KEYS[6], ARGV[2])
end
local reply = {now}
while true do
  local cmd = redis.call("LPOP", KEYS[7])
  if not cmd then break end
  reply[#reply + 1] = cmd
end
return reply
