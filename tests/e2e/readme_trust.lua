-- Runs the README's Neovim example as a user's config would, then asks each file's server to benchmark it: what the
-- server answers shows the trust the example gave it. Reads DICE_E2E_* variables, writes JSON lines to DICE_E2E_OUT.
local emit = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":h") .. "/record.lua")

local ok, err = pcall(function()
  dofile(os.getenv("DICE_E2E_CONFIG"))  -- the README's example, as written there
  for _, file in ipairs(vim.split(os.getenv("DICE_E2E_FILES"), "\n")) do
    vim.cmd("edit " .. vim.fn.fnameescape(file))
    local buf = vim.api.nvim_get_current_buf()
    local client
    assert(vim.wait(30000, function()
      client = vim.lsp.get_active_clients and vim.lsp.buf_get_clients(buf)[next(vim.lsp.buf_get_clients(buf))]
      return client ~= nil and client.initialized
    end, 50), "no server attached to " .. file)
    local answer = client.request_sync("workspace/executeCommand",
      { command = "dice.server.benchmark", arguments = { vim.uri_from_bufnr(buf) } }, 60000, buf)
    emit("benchmark", { file = file, client = client.id, answer = answer and answer.result or answer })
  end
end)

if not ok then emit("error", tostring(err)) end
emit.close()
vim.cmd("qa!")
