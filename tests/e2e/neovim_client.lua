-- An independent LSP client for dice-lsp's end-to-end test: headless Neovim's own LSP implementation.
-- Reads DICE_E2E_* environment variables, writes what it saw as JSON lines to DICE_E2E_OUT, then quits.
local emit = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":h") .. "/record.lua")

local ok, err = pcall(function()
  local python = os.getenv("DICE_E2E_PYTHON")
  local deceptive = os.getenv("DICE_E2E_DECEPTIVE")
  local problem = os.getenv("DICE_E2E_PROBLEM")
  local model = os.getenv("DICE_E2E_MODEL") or ""

  local client_id = vim.lsp.start_client({
    name = "dice-lsp",
    cmd = { python, "-m", "dice_lsp" },
    root_dir = vim.fn.fnamemodify(deceptive, ":h"),
    -- initializationOptions: Neovim 0.7 answers workspace/configuration but does not declare it, so the server
    -- does not ask; the options are the settings every client can send
    init_options = { dice = { model = model, trustedWorkspace = false, device = "cpu",
                              decoding = { maxNewTokens = 24, steps = 4 } } },
  })
  assert(client_id, "the server did not start")

  -- 1. Diagnostics of a deceptive file.
  vim.cmd("edit " .. vim.fn.fnameescape(deceptive))
  local deceptive_buf = vim.api.nvim_get_current_buf()
  vim.lsp.buf_attach_client(deceptive_buf, client_id)
  local got = vim.wait(20000, function() return #vim.diagnostic.get(deceptive_buf) > 0 end, 50)
  assert(got, "no diagnostics arrived for the deceptive file")
  local diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(deceptive_buf)) do
    table.insert(diagnostics, { line = d.lnum, code = d.user_data and d.user_data.lsp and d.user_data.lsp.code
                                or d.code, severity = d.severity, message = d.message, source = d.source })
  end
  emit("diagnostics", diagnostics)

  -- 2. List the code actions on `class Model` of a problem and apply "Generate CUDA kernel".
  vim.cmd("edit " .. vim.fn.fnameescape(problem))
  local problem_buf = vim.api.nvim_get_current_buf()
  vim.lsp.buf_attach_client(problem_buf, client_id)
  local client = vim.lsp.get_client_by_id(client_id)
  vim.wait(10000, function() return client.initialized end, 50)
  local line = vim.fn.search("^class Model") - 1
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(problem_buf) },
    range = { start = { line = line, character = 0 }, ["end"] = { line = line, character = 0 } },
    context = { diagnostics = {} },
  }
  local responses = vim.lsp.buf_request_sync(problem_buf, "textDocument/codeAction", params, 20000) or {}
  local titles, generate = {}, nil
  for _, response in pairs(responses) do
    for _, action in ipairs(response.result or {}) do
      table.insert(titles, action.title)
      if action.title == "Generate CUDA kernel" then generate = action end
    end
  end
  emit("actions", titles)
  assert(generate, "no Generate CUDA kernel action")
  local command = generate.command
  local result = client.request_sync("workspace/executeCommand",
    { command = command.command, arguments = command.arguments }, 300000, problem_buf)
  vim.cmd("silent! wall")
  emit("applied", result and result.result or { error = result and result.err })
end)

if not ok then emit("error", tostring(err)) end
emit.close()
vim.cmd("qa!")
