-- File a batch member (or batch callback) in dead and record its death in its batch, in one atomic
-- step. store/batch_scripts.py builds the script from batch_lib.lua, then the filing script (settle.lua
-- or file_unsettled.lua) wrapped as `filing()`, then `local KB, AB = ...` (where the batch layout
-- starts after that script's own KEYS[1] ... and ARGV), then this text.
--
-- KEYS, ARGV  the filing script's own (with its dead-set death notice), then the batch layout of
--             batch_lib.lua with outcome "dead"
-- Returns what the filing script returns. The batch is recorded only when the job was filed now (1,
-- or 3 for settle.lua's filing of a job whose in-progress entry Redis lost): a job recovery took is
-- recorded by the copy that runs now, and a filing already made (2) was recorded with it.
local wrong = batch_check(KB, AB)
if wrong then
  return wrong
end
local filed = filing()
if filed == 1 or filed == 3 then
  batch_run(KB, AB)
end
return filed
