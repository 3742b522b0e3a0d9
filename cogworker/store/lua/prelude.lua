-- Helpers shared by the scripts: not run alone. cogworker/store/scripts.py puts the helpers a script
-- calls (and the helpers those call) in front of its text when it loads it, so a script's SHA covers
-- the helpers it runs with: a changed helper is a new script to Redis, never run under an old SHA.
--
-- Each helper is one block: its comment, then `local function NAME`, with no blank line inside; a
-- blank line ends the block (scripts.py splits this file on blank lines). Helpers take keys as
-- arguments, from the calling script's KEYS, and never build a key name.
-- tests/structure/test_lua_prelude.py fails when a script defines a helper of the same name again,
-- or checks a key's type with TYPE itself instead of through these.

-- The type of `key` as TYPE names it ("string", "list", "set", "zset", "hash", ..., "none").
local function key_type(key)
  return redis.call("TYPE", key)["ok"]
end

-- True when `key` exists and is not a `wanted` (a TYPE name). A missing key is never wrong: any
-- write creates it with the type that write gives it.
local function is_wrong_type(key, wanted)
  local kind = key_type(key)
  return kind ~= wanted and kind ~= "none"
end

-- The first key of `wanted` (a list of {key, type} pairs) that has the wrong type, or nil. A script
-- checks every key it will write before its first write, because Redis keeps what a script wrote
-- before an error: a script whose later write fails on a wrong-type key has already made its
-- earlier writes (a job taken off a list and never filed). Checked first, nothing is changed and
-- the script answers {"wrongtype", key} for the key guard to move that key aside.
local function first_wrong_type(wanted)
  for _, want in ipairs(wanted) do
    if is_wrong_type(want[1], want[2]) then
      return want[1]
    end
  end
  return nil
end

-- Redis's clock: whole seconds and microseconds (TIME). A script that reads TIME and then writes
-- must have its writes replicated, not itself (a replica running it would read another time):
-- Redis 5 and later do that by default, older servers only after replicate_commands. `fallback`,
-- when given, is the caller's clock (epoch seconds) that stands in when TIME is refused (an ACL user
-- without it), so that recovery never stops on a missing permission; without one, a refusal is
-- raised.
local function redis_clock(fallback)
  if redis.replicate_commands then redis.replicate_commands() end
  if fallback == nil then
    local time = redis.call("TIME")
    return tonumber(time[1]), tonumber(time[2])
  end
  local ok, time = pcall(redis.call, "TIME")
  if not ok then
    return tonumber(fallback), 0
  end
  return tonumber(time[1]), tonumber(time[2])
end

-- Count `n` more processed jobs: the total and the day's counter, which gets its expiry (a year)
-- once, in the call that created it.
local function count_processed(total_key, day_key, n)
  redis.call("INCRBY", total_key, n)
  if redis.call("INCRBY", day_key, n) == n then
    redis.call("EXPIRE", day_key, 60 * 60 * 24 * 365)
  end
end

-- Push a death notice onto the notices list `key`, which keeps the newest `keep` (see "Death
-- notices and on_death hooks" in docs/architecture.md).
local function push_death_notice(key, notice, keep)
  redis.call("LPUSH", key, notice)
  redis.call("LTRIM", key, 0, tonumber(keep) - 1)
end

-- Trim the dead set `key` to its cap: entries scored before `oldest` go, then all but the newest
-- `cap` (a cap of 0, or none, keeps everything).
local function trim_dead(key, cap, oldest)
  cap = tonumber(cap)
  if cap and cap > 0 then
    redis.call("ZREMRANGEBYSCORE", key, "-inf", "(" .. oldest)  -- not a key: a score bound
    redis.call("ZREMRANGEBYRANK", key, 0, -cap - 1)
  end
end

-- The keys a recovery script (requeue.lua, reconcile.lua) was given for the jobs on a list, by
-- name: {queue = {name -> key}, suspects = ..., counter = {jid -> key}, lock = {entry -> key},
-- digest = {payload digest -> key}}. The caller declared them from its own read of the list
-- (store/job_keys.py): nq (queue key, suspects key) pairs from KEYS[first_key], then nc, nl and nd
-- keys; ARGV[counts_at .. counts_at+3] are nq, nc, nl, nd and the names follow them, in KEYS order.
-- Keys are only ever looked up here, never built: Redis Cluster and Dragonfly refuse a key a script
-- wasn't given. Also returns where KEYS and ARGV go on after them.
local function read_declared(first_key, counts_at)
  local declared = {queue = {}, suspects = {}, counter = {}, lock = {}, digest = {}}
  local k, a = first_key, counts_at + 4
  for i, kind in ipairs({"queue", "counter", "lock", "digest"}) do
    for _ = 1, tonumber(ARGV[counts_at + i - 1]) do
      declared[kind][ARGV[a]] = KEYS[k]
      if kind == "queue" then
        k = k + 1
        declared.suspects[ARGV[a]] = KEYS[k]
      end
      k, a = k + 1, a + 1
    end
  end
  return declared, k, a
end

-- A payload on an in-progress list as the recovery scripts read it: the queue it goes back to
-- (`fallback_queue` when its own can't be read: the processor buries it from there), its jid (or
-- nil), and the periodic entry whose running lock it holds (or nil). store/job_keys.py reads
-- payloads the same way to declare their keys.
local function read_job(raw, fallback_queue)
  local queue, jid, pname = fallback_queue, nil, nil
  local ok, decoded = pcall(cjson.decode, raw)
  if ok and type(decoded) == "table" then
    if type(decoded["queue"]) == "string" and decoded["queue"] ~= "" then
      queue = decoded["queue"]
    end
    if type(decoded["jid"]) == "string" then
      jid = decoded["jid"]
    end
    local name = decoded["periodic_name"]
    if decoded["periodic_until_executed"] == true and type(name) == "string" and jid then
      pname = name
    end
  end
  return queue, jid, pname
end

-- The declared keys (read_declared) a job needs -- {queue, suspects, counter, lock} -- or nil after
-- noting in `needs` (kind -> {name -> true}) each one the caller didn't declare: the list changed
-- after it read it, and it declares them for its next pass. The orphan counter is keyed by jid, or
-- for a payload without one by the digest of its bytes (`digest`, computed here when not given).
local function declared_keys_for(declared, needs, raw, queue, jid, pname, digest)
  local found = {queue = declared.queue[queue], suspects = declared.suspects[queue]}
  if not found.queue then needs.queue[queue] = true end
  local complete = found.queue ~= nil
  if jid then
    found.counter = declared.counter[jid]
    if not found.counter then needs.counter[jid], complete = true, false end
  else
    digest = digest or redis.sha1hex(raw)
    found.counter = declared.digest[digest]
    if not found.counter then needs.digest[digest], complete = true, false end
  end
  if pname then
    found.lock = declared.lock[pname]
    if not found.lock then needs.lock[pname], complete = true, false end
  end
  return complete and found or nil
end

-- A job's orphan count after this orphaning (INCR, the counter kept `ttl_s` seconds), or as it
-- stands when not `counting` (a clean stop's requeue, or a reconcile of an entry no thread failed
-- on, only reads it to send a suspect back to its suspects list). A counter of the wrong type is
-- named in `wrong` (key -> true) for the key guard: read, it counts as none (0), since it must not
-- keep a clean stop's jobs on the list; counted, the answer is nil and nothing is counted.
local function count_orphaning(key, counting, ttl_s, wrong)
  if not counting then
    local count = redis.pcall("GET", key)
    if type(count) == "table" then
      wrong[key] = true
      return 0
    end
    return tonumber(count or "") or 0
  end
  local count = redis.pcall("INCR", key)
  if type(count) ~= "number" then
    wrong[key] = true
    return nil
  end
  redis.call("EXPIRE", key, ttl_s)
  return count
end

-- Append the names in the set `names` (name -> true) to `reply` and count them in reply[count_at]:
-- the variable-length parts of the recovery scripts' replies.
local function append_names(reply, names, count_at)
  for name in pairs(names) do
    reply[#reply + 1] = name
    reply[count_at] = reply[count_at] + 1
  end
end

-- Append the needs noted by declared_keys_for, as kind, name pairs in the order of `kinds`, to
-- `reply`, counting the pairs in reply[count_at].
local function append_needs(reply, needs, kinds, count_at)
  for _, kind in ipairs(kinds) do
    for name in pairs(needs[kind]) do
      reply[#reply + 1] = kind
      reply[#reply + 1] = name
      reply[count_at] = reply[count_at] + 1
    end
  end
end
