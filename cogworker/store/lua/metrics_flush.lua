-- One worker process's per-minute metrics since its last flush (worker/metrics/flusher.py), added
-- to the minute hashes of store/metrics_layout.py once, however many times the flush is sent.
--
-- KEYS[1]            this process's flush record (string: the last sequence number applied)
-- KEYS[2 .. 1+nh]    the minute hashes written (metrics:j:<minute>, metrics:q:<minute>, and with
--                    COGWORKER_SIDEKIQ_METRICS Sidekiq 7's j|<date>|<H>:<M>)
-- KEYS[2+nh .. 1+nh+nc]  Sidekiq 7's histogram strings (<class>-<DD>-<HH>:<M>): u16 counters
-- KEYS[2+nh+nc ..]   the queues whose oldest waiting job's latency is sampled
-- ARGV[1]            this flush's sequence number (1, 2, ... per process)
-- ARGV[2]            how long the flush record lives, seconds (written when something was counted)
-- ARGV[3]            the sender's clock, epoch milliseconds (the latency's "now", the expiries' base)
-- ARGV[4]            nh, the number of minute hashes
-- ARGV[5]            the index in KEYS of the hash the latencies go to (this minute's queue hash;
--                    0 when no queue is sampled)
-- ARGV[6]            that hash's expiry, epoch seconds
-- ARGV[7]            nc, the number of histogram strings (0 unless COGWORKER_SIDEKIQ_METRICS)
-- then per minute hash, in KEYS order: its expiry (epoch seconds), n, and n field/amount pairs;
-- then per histogram string, in KEYS order: its expiry, n, and n counter/amount pairs (`#<i>`);
-- then per sampled queue, in KEYS order, its latency field (`<queue>|lat_ms`).
--
-- Returns {1, skipped...} when applied, {0} when this sequence number was applied before (a resend
-- after a lost reply: nothing is counted twice), {"wrongtype", KEYS[1]} when the flush record has
-- the wrong type (nothing written: the sender keeps the flush and asks the key guard). A minute hash
-- of the wrong type is skipped and named after the 1: its counts are lost, the rest is written, as
-- metrics must never stop a worker. A histogram string of the wrong type is skipped the same way.

local record = KEYS[1]
if is_wrong_type(record, "string") then
  return {"wrongtype", record}
end
local seq = tonumber(ARGV[1])
if seq <= (tonumber(redis.call("GET", record) or "0") or 0) then
  return {0}
end
local now_ms = tonumber(ARGV[3])
local now_s = math.floor(now_ms / 1000)
local nh = tonumber(ARGV[4])
local reply = {1}
local counted = false
local nc = tonumber(ARGV[7])
local a = 8
for i = 1, nh do
  local key = KEYS[1 + i]
  local expire_at, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  a = a + 2
  if is_wrong_type(key, "hash") then
    reply[#reply + 1] = key
  elseif n > 0 then
    for j = a, a + 2 * n - 1, 2 do
      redis.call("HINCRBY", key, ARGV[j], ARGV[j + 1])
    end
    redis.call("EXPIRE", key, math.max(1, expire_at - now_s))
    counted = true
  end
  a = a + 2 * n
end
-- Saturating, as Sidekiq adds to them: a counter full at 65,535 stays there instead of wrapping to 0.
for i = 1, nc do
  local key = KEYS[1 + nh + i]
  local expire_at, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  a = a + 2
  if is_wrong_type(key, "string") then
    reply[#reply + 1] = key
  elseif n > 0 then
    local command = {"BITFIELD", key, "OVERFLOW", "SAT"}
    for j = a, a + 2 * n - 1, 2 do
      command[#command + 1] = "INCRBY"
      command[#command + 1] = "u16"
      command[#command + 1] = ARGV[j]
      command[#command + 1] = ARGV[j + 1]
    end
    redis.call(unpack(command))
    redis.call("EXPIRE", key, math.max(1, expire_at - now_s))
    counted = true
  end
  a = a + 2 * n
end

-- Latency: how long each queue's oldest waiting job (its right end) has waited, from its
-- enqueued_at (else created_at) as ops/queues.py reads it; the largest sample of the minute is kept.
local latency_at = tonumber(ARGV[5])
if latency_at > 0 then
  local target = KEYS[latency_at]
  if is_wrong_type(target, "hash") then
    reply[#reply + 1] = target
  else
    local wrote = false
    for k = 2 + nh + nc, #KEYS do
      local field = ARGV[a + k - 2 - nh - nc]
      -- pcall: a queue key of the wrong type is the key guard's to move; it costs only its sample.
      local ok, raw = pcall(redis.call, "LINDEX", KEYS[k], -1)
      local decoded, job = false, nil
      if ok and raw then
        decoded, job = pcall(cjson.decode, raw)
      end
      if decoded and type(job) == "table" then
        local stamp = job["enqueued_at"] or job["created_at"]
        if type(stamp) == "number" then
          local latency = math.floor(now_ms - stamp * 1000)
          if latency > (tonumber(redis.call("HGET", target, field) or "0") or 0) then
            redis.call("HSET", target, field, latency)
            wrote = true
          end
        end
      end
    end
    if wrote then
      redis.call("EXPIRE", target, math.max(1, tonumber(ARGV[6]) - now_s))
    end
  end
end

-- Recorded only when something was counted: sending an empty flush again changes nothing, and an
-- idle process then writes no key at all.
if counted then
  redis.call("SET", record, seq, "EX", tonumber(ARGV[2]))
end
return reply
