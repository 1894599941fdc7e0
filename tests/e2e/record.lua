-- What an end-to-end Neovim script saw, as JSON lines in the file DICE_E2E_OUT: `record(kind, value)`, then
-- `record.close()`. Each script loads it with dofile beside itself.
local out = assert(io.open(os.getenv("DICE_E2E_OUT"), "w"))
return setmetatable({ close = function() out:close() end }, { __call = function(_, kind, value)
  out:write(vim.fn.json_encode({ kind = kind, value = value }) .. "\n")
  out:flush()
end })
