-- A deploy marker (api/deploy_marks.py), added to the markers' sorted set, and the markers older
-- than the keep trimmed, in one step. The member is the marker's own JSON, so writing the same
-- marker again (a retry after a lost reply) changes nothing.
--
-- KEYS[1]  the markers (zset: score = epoch seconds, member = {"at", "label", "by"} as JSON)
-- ARGV[1]  the marker's time, epoch seconds
-- ARGV[2]  the marker (JSON)
-- ARGV[3]  markers scored before this are trimmed: an exclusive score bound, "(<epoch seconds>"
--
-- Returns 1 when the marker is new, 0 when it was there already, {"wrongtype", KEYS[1]} when the
-- key holds something else (nothing written).

local bad = first_wrong_type({{KEYS[1], "zset"}})
if bad then
  return {"wrongtype", bad}
end
local added = redis.call("ZADD", KEYS[1], ARGV[1], ARGV[2])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", ARGV[3])
return added
