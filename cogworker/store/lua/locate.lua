-- One bounded stretch of the search for one job (cogworker/ops/locate.py, the Web UI's job page):
-- at most ARGV[5] elements of the given sets and queues are read per call, from a cursor (key
-- index, offset), and the call says where it stopped. A script holds every other Redis client
-- while it runs: reading 100,000 dead entries in one call held every worker for 150 ms, so the
-- caller makes several short calls instead (each about 2 ms; see ops/locate.py) and stops when
-- its own budget is spent. The search only reads.
--
-- Each element's text is searched with a plain string.find for `"jid":` followed by the quoted
-- jid: `"jid":"<jid>"` as cogworker writes it, `"jid": "<jid>"` as other JSON writers do. A hit
-- is only a candidate: the caller decodes it and keeps it only if its payload's jid is exactly
-- this one. Sets are read newest first (ZREVRANGE) and queues from their left end (where jobs are
-- pushed): what arrives between two calls lands before the cursor and shifts what is still unread
-- further on, so it is read twice rather than skipped. A key of the wrong type is skipped and
-- reported (the key guard moves such keys; this page only reads).
--
-- KEYS[1..]  the sets and queues to search, in search order (the three sets at least: never none)
-- ARGV[1]  the jid (the caller allows only letters, digits and "_.:-")
-- ARGV[2]  one letter per key: "z" a sorted set, "l" a list
-- ARGV[3]  the key index to start at (1-based)
-- ARGV[4]  the offset in that key to start at (0-based, in reading order)
-- ARGV[5]  the budget: elements to read at most in this call
-- ARGV[6]  how many candidates to return at most (the call stops just after the last one)
-- ARGV[7]  what visiting one key costs from the budget (its length read and its range call), so
--          a call over many empty queues is bounded too
-- Returns {hits, notes, next key index, next offset, elements read}; a next key index past
-- #KEYS means the search is done.
--   hits:  {key index, position, raw element, length}: position is the score as Redis writes it
--          (sets) or the index from the left end (queues); length the key's length
--   notes: {key index, "wrongtype"}

local kinds = ARGV[2]
local index, offset = tonumber(ARGV[3]), tonumber(ARGV[4])
local budget, hit_cap, key_cost = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local field, quoted = '"jid":', '"' .. ARGV[1] .. '"'  -- not a key: the text searched for

local function holds_jid(item)
  -- Almost every element lacks the quoted jid: one find settles those.
  if not string.find(item, quoted, 1, true) then
    return false
  end
  local at = string.find(item, field, 1, true)
  return at ~= nil and string.find(item, quoted, at + #field, true) ~= nil
end

local hits, notes, read = {}, {}, 0
while index <= #KEYS and budget > 0 and #hits < hit_cap do
  local key = KEYS[index]
  local is_set = string.sub(kinds, index, index) == "z"
  budget = budget - key_cost
  -- pcall: a key of the wrong type answers an error, which skips it instead of failing the search.
  local length = redis.pcall(is_set and "ZCARD" or "LLEN", key)
  if type(length) == "table" then
    table.insert(notes, {index, "wrongtype"})
    length = 0
  end
  if offset < length then
    -- At least one element per key visited, so every call moves on.
    local stop = math.min(length, offset + math.max(budget, 1)) - 1
    local items = redis.call(is_set and "ZREVRANGE" or "LRANGE", key, offset, stop)
    local last = offset + #items - 1
    for n, item in ipairs(items) do
      if holds_jid(item) then
        local position = offset + n - 1
        local where = is_set and redis.call("ZSCORE", key, item) or tostring(position)
        table.insert(hits, {index, where, item, length})
        if #hits >= hit_cap then
          last = position
          break
        end
      end
    end
    read = read + (last - offset + 1)
    budget = budget - (last - offset + 1)
    offset = last + 1
  end
  if offset >= length then
    index, offset = index + 1, 0
  end
end
return {hits, notes, index, offset, read}
