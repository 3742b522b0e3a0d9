-- Delete a lock only if it still holds the given owner: a lock that expired and passed to a newer
-- holder must not be released by the old one.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the owner (a jid)
-- Returns 1 when deleted, 0 otherwise, or {"wrongtype", key} when the key holds something other
-- than a string (not a lock of ours any more: left for the key guard, which moves it aside).
if is_wrong_type(KEYS[1], "string") then
  return {"wrongtype", KEYS[1]}
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
