-- File a finished-with-failure job into a sorted set and take it off the in-progress list, atomically.
--
-- KEYS[1]  the in-progress list it was fetched onto (with ARGV[1] = "", any key of the same slot: unread)
-- KEYS[2]  the set to file it in (cogworker:retry, cogworker:dead or cogworker:schedule)
-- KEYS[3]  cogworker:stat:failed (cogworker:stat:limited for a job a rate limiter put back in
--          schedule), or the same key as KEYS[2] with ARGV[4] = "0" (nothing to count)
-- KEYS[4]  the same counter's key for <today>
-- KEYS[5]  the job's orphan counter (it ran to the end: its count is moot)
-- ARGV[1]  the raw payload as fetched; "" for a job basic fetch popped (BRPOP): it is on no list, so
--          nothing is taken off one and it is filed all the same
-- ARGV[2]  score in the set
-- ARGV[3]  the payload to file (with its error, retry count, ...)
-- ARGV[4]  "1" to count a failure, "0" not to
-- ARGV[5]  dead-set cap: most entries kept (0 = no cap)
-- ARGV[6]  dead-set cap: entries older than this score are trimmed
-- ARGV[7]  Redis's run_id (INFO server) on the connection that fetched the job; "" when unknown
-- KEYS[6], ARGV[8], ARGV[9]  (only when filing in dead) cogworker:deaths, the death notice to push
--          there, and how many notices that list keeps (see "Death notices and on_death hooks" in
--          docs/architecture.md)
-- Returns 1 when filed; 2 when this filing was already made (an earlier call of the same filing
-- whose reply was lost: nothing written again); 3 when filed although the job was not on the list,
-- because Redis lost its entry (its run_id is not the one at fetch: restarted without the data, or a
-- replica promoted without it); 0 when the job was no longer in progress (recovery took it: nothing
-- filed, so the job is not both requeued and filed); or {"wrongtype", key} when a key has the wrong
-- type (nothing changed: the job stays in progress and the caller files it again later).
--
-- Every key's type is checked before the job is taken off the list: Redis keeps what a script did
-- before an error, so a removal followed by a failed ZADD would lose the job.
local listed = ARGV[1] ~= ""
local wanted = {{KEYS[2], "zset"}}
if listed then
  table.insert(wanted, 1, {KEYS[1], "list"})
end
if ARGV[4] == "1" then
  wanted[#wanted + 1] = {KEYS[3], "string"}
  wanted[#wanted + 1] = {KEYS[4], "string"}
end
if KEYS[6] then
  wanted[#wanted + 1] = {KEYS[6], "list"}
end
local bad = first_wrong_type(wanted)
if bad then
  return {"wrongtype", bad}
end
local filed = 1
if not listed then
  -- No list to gate on (basic fetch): the entry an earlier call of this filing wrote is the gate.
  if redis.call("ZSCORE", KEYS[2], ARGV[3]) then
    return 2
  end
elseif redis.call("LREM", KEYS[1], -1, ARGV[1]) == 0 then
  -- Not on the list. The entry an earlier call of this filing wrote says it already ran: the filed
  -- text (jid, time of failure, error) is this failure's own. Only here, off the usual path.
  if redis.call("ZSCORE", KEYS[2], ARGV[3]) then
    return 2
  end
  -- A Redis that is not the one the job was fetched from lost the entry with its data: filing it
  -- is the only way the failure is not lost (recovery never saw it). INFO refused (an ACL): unknown,
  -- so nothing is filed, as when recovery took it.
  local ok, info = pcall(redis.call, "INFO", "server")
  local run_id = ok and type(info) == "string" and string.match(info, "run_id:(%x+)") or nil
  if ARGV[7] == "" or run_id == nil or run_id == ARGV[7] then
    return 0
  end
  filed = 3
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
if ARGV[4] == "1" then
  redis.call("INCR", KEYS[3])
  redis.call("INCR", KEYS[4])
  redis.call("EXPIRE", KEYS[4], 60 * 60 * 24 * 365)
end
redis.call("DEL", KEYS[5])
if KEYS[6] then
  push_death_notice(KEYS[6], ARGV[8], ARGV[9])
end
trim_dead(KEYS[2], ARGV[5], ARGV[6])
return filed
