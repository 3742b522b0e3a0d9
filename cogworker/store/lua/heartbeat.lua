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
-- ARGV[7]  "1" when quiet, "2" when stopping (a stopping process is quiet too): the presence hash
--          gets quiet "1" and stopping "1" then; "0"/"1" (older callers) write stopping "0"
-- ARGV[8]  number of queue names that follow
-- ARGV[9..8+n]   queue names
-- ARGV[9+n..]    the running jobs as pairs: thread key, JSON summary
-- Returns {now, n, <n keys a write to failed>..., <remote commands, oldest first>...}. The commands
-- are read, not taken: the caller trims the ones it handled, so a beat whose reply is lost (Redis
-- stalled past the client's timeout and ran it anyway) loses no command; it comes again next beat.
--
-- Each key's writes are tried on their own (pcall): one key of the wrong type must not stop the
-- rest of the beat -- a process whose presence stops being written looks dead, and recovery would
-- requeue the jobs it is still running. The keys that failed are named for the key guard.
local now = redis_clock()
local id = ARGV[1]
local failed = {}

local function try(key, ...)
  local reply = redis.pcall(...)
  if type(reply) == "table" and reply.err then
    failed[#failed + 1] = key
    return false
  end
  return true
end

local quiet, stopping = ARGV[7], "0"
if quiet == "2" then quiet, stopping = "1", "1" end
if try(KEYS[1], "HSET", KEYS[1], "info", ARGV[4], "busy", ARGV[5], "rss", ARGV[6], "quiet", quiet,
       "stopping", stopping, "beat", now) then
  redis.call("EXPIRE", KEYS[1], ARGV[2])
end
try(KEYS[2], "SADD", KEYS[2], id)
try(KEYS[3], "HSET", KEYS[3], id, now)
if ARGV[3] == "1" then
  try(KEYS[4], "SADD", KEYS[4], id)
end
local nq = tonumber(ARGV[8])
for i = 9, 8 + nq do
  if not try(KEYS[5], "ZADD", KEYS[5], now, ARGV[i]) then break end
end
redis.call("DEL", KEYS[6])
local first = 9 + nq
if #ARGV >= first then
  redis.call("HSET", KEYS[6], unpack(ARGV, first))
  redis.call("EXPIRE", KEYS[6], ARGV[2])
end
local commands = redis.pcall("LRANGE", KEYS[7], 0, -1)
if type(commands) == "table" and commands.err then
  failed[#failed + 1] = KEYS[7]
  commands = {}
end
local reply = {now, #failed}
for _, key in ipairs(failed) do reply[#reply + 1] = key end
-- Senders LPUSH: the oldest command is at the tail.
for i = #commands, 1, -1 do reply[#reply + 1] = commands[i] end
return reply
