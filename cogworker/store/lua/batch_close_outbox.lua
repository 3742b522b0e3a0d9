-- batch_close.lua in the sharded layout: store/batch_scripts.py builds the script from batch_lib.lua,
-- batch_close.lua wrapped as `closing()`, then this text. The callbacks its decision fires are
-- written to the home outbox (the last key), not pushed.
--
-- KEYS[1 ..], ARGV  batch_close.lua's (with no callback queue keys), then KEYS[#KEYS] the home outbox
-- Returns {released, callback entry ids written...}, or {"wrongtype", key} (nothing changed).
if is_wrong_type(KEYS[#KEYS], "hash") then
  return {"wrongtype", KEYS[#KEYS]}
end
batch_mode.outbox = KEYS[#KEYS]
local released = closing()
if type(released) == "table" then
  return released
end
local reply = {released}
for _, id in ipairs(batch_mode.fired) do
  reply[#reply + 1] = id
end
return reply
