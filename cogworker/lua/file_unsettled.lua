-- File one record another process handed over at shutdown (cogworker:unsettled) into its set.
--
-- KEYS[1]  cogworker:unsettled
-- KEYS[2]  the set named by the record (already checked to be one of ours)
-- KEYS[3]  the job's orphan counter
-- ARGV[1]  the record, as it is at the head of the list
-- ARGV[2]  score
-- ARGV[3]  payload
-- Returns 1 when filed, 0 when the head changed (another process filed it).
if redis.call("LINDEX", KEYS[1], 0) ~= ARGV[1] then
  return 0
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("LPOP", KEYS[1])
redis.call("DEL", KEYS[3])
return 1
