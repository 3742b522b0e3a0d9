-- Where one job waits: the retry, scheduled and dead sets and the given queues, searched inside
-- Redis, so the Web UI's job page (cogworker/ops/locate.py) sends one command however big the sets
-- and queues are. The search only reads.
--
-- Every element is read in slices (ZRANGE / LRANGE) and its text searched with a plain
-- string.find for `"jid":` followed by the quoted jid: `"jid":"<jid>"` as cogworker writes it, and
-- `"jid": "<jid>"` as other JSON writers do. ZSCAN with MATCH on the same text was measured first:
-- 2.5 times slower on 100,000 dead entries (it copies each member and formats each score before
-- matching), so sets are sliced like lists. A hit is only a candidate: the caller decodes it and
-- keeps it only if its payload's jid is exactly this one. The sets are read whole (a job may be
-- anywhere in them); the queues at most ARGV[2] jobs each and ARGV[4] in all, from the left end
-- (where jobs are pushed), so that 200 long queues can't hold Redis for seconds. A key of another
-- type is skipped and reported (the key guard moves such keys; this page only reads).
--
-- KEYS[1]  cogworker:retry     (zset)
-- KEYS[2]  cogworker:schedule  (zset)
-- KEYS[3]  cogworker:dead      (zset)
-- KEYS[4..] the queue lists to look in (cogworker:queue:<name>), the likeliest first
-- ARGV[1]  the jid (the caller allows only letters, digits and "_.:-")
-- ARGV[2]  how many jobs of each queue to look at, at most
-- ARGV[3]  how many hits to return per key, at most (a jid is unique: more is damaged data)
-- ARGV[4]  how many queued jobs to look at in all, at most
-- Returns {hits, notes}.
--   hits:  {key index, position, raw entry, length}: position is the score as Redis writes it
--          (sets) or the list index from the left end (queues); length the queue's length (0 for sets)
--   notes: {key index, "wrongtype" | "truncated", the key's length (0 for wrongtype)}: "truncated",
--          a queue not searched to its end
local SET_KEYS = 3
-- Elements per ZRANGE/LRANGE: 5,000 entries of a few hundred bytes are about 1.5 MB of Lua strings.
local SLICE = 5000

local queue_cap, hit_cap, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local field, quoted = '"jid":', '"' .. ARGV[1] .. '"'

local function holds_jid(item)
  -- Almost every element lacks the quoted jid: one find settles those.
  if not string.find(item, quoted, 1, true) then
    return false
  end
  local at = string.find(item, field, 1, true)
  return at ~= nil and string.find(item, quoted, at + #field, true) ~= nil
end

-- Calls found(position, item) for each candidate among the first `last + 1` elements of `key`.
local function search(key, is_set, last, found)
  local count, start = 0, 0
  while start <= last and count < hit_cap do
    local stop = math.min(start + SLICE - 1, last)
    local items = redis.call(is_set and "ZRANGE" or "LRANGE", key, start, stop)
    for offset, item in ipairs(items) do
      if count < hit_cap and holds_jid(item) then
        found(start + offset - 1, item)
        count = count + 1
      end
    end
    start = start + SLICE
  end
end

local hits, notes = {}, {}
for index, key in ipairs(KEYS) do
  local is_set = index <= SET_KEYS
  local wanted = is_set and "zset" or "list"
  local kind = redis.call("TYPE", key)["ok"]
  if kind ~= "none" and kind ~= wanted then
    table.insert(notes, {index, "wrongtype", 0})
  elseif kind == wanted and is_set then
    search(key, true, redis.call("ZCARD", key) - 1, function(_, item)
      table.insert(hits, {index, redis.call("ZSCORE", key, item), item, 0})
    end)
  elseif kind == wanted then
    local length = redis.call("LLEN", key)
    local reading = math.min(length, queue_cap, budget)
    if reading < length then
      table.insert(notes, {index, "truncated", length})
    end
    budget = budget - reading
    search(key, false, reading - 1, function(position, item)
      table.insert(hits, {index, tostring(position), item, length})
    end)
  end
end
return {hits, notes}
