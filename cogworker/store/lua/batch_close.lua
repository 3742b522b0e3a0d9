-- A `with cogworker.batch()` or `with b.jobs()` block ended: release its hold on the batch and, if
-- nothing else holds it and no member is pending, complete it (and its parents), after batch_lib.lua.
--
-- KEYS[1 ..], ARGV[1 ..]  the batch layout of batch_lib.lua, with kb = 1 and ab = 1 and outcome "close"
-- Returns 1, or {"wrongtype", key} (nothing changed).
local wrong = batch_check(1, 1)
if wrong then
  return wrong
end
batch_run(1, 1)
return 1
