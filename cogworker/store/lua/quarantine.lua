-- Move one key of the wrong type aside (the key guard), checked and moved in one step. Checked in
-- one round trip and renamed in another, a key that another process's guard had moved meanwhile,
-- and that a push had created again -- a healthy queue, with jobs on it -- would be quarantined.
--
-- KEYS[1]  the key
-- KEYS[2]  the quarantine key to rename it to (cogworker:quarantine:<key>:<time>)
-- ARGV[1]  the type the key should have
-- ARGV[2]  the quarantine key's TTL, seconds
-- Returns the type found when the key was moved, or nil when it is absent or of the right type.
local kind = key_type(KEYS[1])
if kind == ARGV[1] or kind == "none" then
  return false
end
redis.call("RENAME", KEYS[1], KEYS[2])
redis.call("EXPIRE", KEYS[2], ARGV[2])
return kind
