-- Drives one headless Neovim session for tests/test_neovim.py, after tests/nvim/init.lua:
-- open the spec's file, wait for the model to load, then for each case put the cursor there, enter
-- insert mode, wait for the ghost text (the case's `want`, when given), accept it with vim.lsp.inline_completion.get() and record
-- what was shown and what the line became. Writes the result as JSON and quits, also on failure
-- and on the watchdog. Every wait is on an event or a predicate (vim.wait), never a fixed sleep.
--
--   DIFFUSION_LSP_SPEC: JSON file {file, result, ready_ms, ghost_ms, watchdog_ms,
--                                  cases = [{line (1-based), col (0-based byte), append, want}]}
local api = vim.api
local session = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'session.lua')
local spec, result, finish, resume = session.spec, session.result, session.finish, session.resume
result.cases = {}
local ghost_ns = api.nvim_create_namespace('nvim.lsp.inline_completion') -- the namespace it draws in

--- The ghost text on screen ("\n" between virtual lines) and how it is drawn, or nil.
local function ghost()
  local marks = api.nvim_buf_get_extmarks(0, ghost_ns, 0, -1, { details = true })
  if #marks == 0 then
    return nil
  end
  local details = marks[1][4]
  local lines, first = {}, {}
  for _, chunk in ipairs(details.virt_text or {}) do
    first[#first + 1] = chunk[1]
  end
  lines[1] = table.concat(first)
  for _, virt_line in ipairs(details.virt_lines or {}) do
    local parts = {}
    for _, chunk in ipairs(virt_line) do
      parts[#parts + 1] = chunk[1]
    end
    lines[#lines + 1] = table.concat(parts)
  end
  return { text = table.concat(lines, '\n'), pos = details.virt_text_pos, row = marks[1][2], col = marks[1][3] }
end

local after = session.after

local function run_case(case)
  api.nvim_win_set_cursor(0, { case.line, case.col })
  local before = api.nvim_buf_get_lines(0, case.line - 1, case.line, true)[1]
  after('InsertEnter', function()
    vim.cmd(case.append and 'startinsert!' or 'startinsert')
  end)
  local record = { before = before, insert_cursor = api.nvim_win_get_cursor(0) }
  local shown
  if vim.wait(spec.ghost_ms, function()
    shown = ghost()
    -- on this line (not a late answer for an earlier case) and, when the case says, the text it wants
    return shown ~= nil and shown.row == case.line - 1 and (case.want == nil or shown.text == case.want)
  end, 10) then
    record.ghost = shown
    record.accepted = vim.lsp.inline_completion.get() -- applies the item on the next loop turn
    vim.wait(spec.ghost_ms, function()
      return api.nvim_buf_get_lines(0, case.line - 1, case.line, true)[1] ~= before
    end, 10)
  end
  record.line = api.nvim_buf_get_lines(0, case.line - 1, case.line, true)[1]
  record.cursor = api.nvim_win_get_cursor(0)
  after('InsertLeave', function()
    vim.cmd('stopinsert')
  end)
  return record
end

local function main()
  local client = session.open(spec.ghost_ms)
  if not client then
    return
  end
  result.offset_encoding = client.offset_encoding
  for _, case in ipairs(spec.cases) do
    result.cases[#result.cases + 1] = run_case(case)
  end
  local reply = client:request_sync('diffusionLsp/stats', {}, spec.ghost_ms, 0)
  result.stats = reply and reply.result
  finish(nil)
end

vim.schedule(function()
  resume(coroutine.create(main))
end)
