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
-- In the Sidekiq mode (worker/loops/sidekiq_presence.py) three more keys, and Sidekiq's presence at the end
-- of ARGV, counted by its last argument (the running jobs' pairs above run up to where it starts):
-- KEYS[8]  Sidekiq's presence hash (<identity>)
-- KEYS[9]  Sidekiq's busy-jobs hash (<identity>:workers in Sidekiq 6, <identity>:work in 7)
-- KEYS[10] Sidekiq's signal list (<identity>-signals)
-- ARGV[#ARGV]  k, how many arguments before it are Sidekiq's: info, busy, beat, quiet, rss (KB),
--              rtt_us, the TTL, then the busy jobs as pairs: thread, JSON {queue, payload, run_at}
-- Returns {now, n, <n keys a write to failed>..., <remote commands, oldest first>...}; in the Sidekiq
-- mode {now, n, <failed keys>..., <Sidekiq signal or "">, <remote commands>...}. The commands
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
local last = #ARGV
if #KEYS >= 10 then last = #ARGV - 1 - tonumber(ARGV[#ARGV]) end
redis.call("DEL", KEYS[6])
local first = 9 + nq
if last >= first then
  redis.call("HSET", KEYS[6], unpack(ARGV, first, last))
  redis.call("EXPIRE", KEYS[6], ARGV[2])
end
-- Sidekiq's presence, as its launcher writes it each beat; its signal taken as its launcher takes it
-- (RPOP: one per beat, and one whose reply is lost is lost, as in Sidekiq).
local signal = nil
if #KEYS >= 10 then
  local s = last + 1
  if try(KEYS[8], "HSET", KEYS[8], "info", ARGV[s], "busy", ARGV[s + 1], "beat", ARGV[s + 2],
         "quiet", ARGV[s + 3], "rss", ARGV[s + 4], "rtt_us", ARGV[s + 5]) then
    redis.call("EXPIRE", KEYS[8], ARGV[s + 6])
  end
  if try(KEYS[9], "DEL", KEYS[9]) and #ARGV - 1 >= s + 7 then
    if try(KEYS[9], "HSET", KEYS[9], unpack(ARGV, s + 7, #ARGV - 1)) then
      redis.call("EXPIRE", KEYS[9], ARGV[s + 6])
    end
  end
  signal = redis.pcall("RPOP", KEYS[10])
  if type(signal) == "table" and signal.err then
    failed[#failed + 1] = KEYS[10]
    signal = nil
  end
  signal = signal or ""
end
local commands = redis.pcall("LRANGE", KEYS[7], 0, -1)
if type(commands) == "table" and commands.err then
  failed[#failed + 1] = KEYS[7]
  commands = {}
end
local reply = {now, #failed}
for _, key in ipairs(failed) do reply[#reply + 1] = key end
if signal ~= nil then reply[#reply + 1] = signal end
-- Senders LPUSH: the oldest command is at the tail.
for i = #commands, 1, -1 do reply[#reply + 1] = commands[i] end
return reply
