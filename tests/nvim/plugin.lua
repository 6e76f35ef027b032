-- Drives one headless session for tests/test_neovim_plugin.py, after tests/nvim/plugin_init.lua:
-- through the plugin's own functions only. Steps, each when the spec has it:
--   ghost     {line (1-based), col}: insert at the end of that line, wait for the ghost text, accept a
--             word (require('diffusion_lsp').accept('word')), wait for the ghost text again, accept the
--             rest; record the line after each
--   next_edit {change = {start_row, start_col, end_row, end_col, text}, cursor = {line, col}}: make the
--             change, ask for the next edit, record what is drawn, move to the last line, press the
--             accept key twice (jump, then apply) and record the buffer
--   health    run :checkhealth diffusion_lsp and record its lines
-- Writes the result as JSON and quits, also on failure and on the watchdog (session.lua).
local api = vim.api
local session = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'session.lua')
local spec, result, finish, resume, after = session.spec, session.result, session.finish, session.resume,
  session.after
local plugin = require('diffusion_lsp')
local next_edit = require('diffusion_lsp.next_edit')
local ghost_ns = api.nvim_create_namespace('nvim.lsp.inline_completion')

local function ghost()
  for _, m in ipairs(api.nvim_buf_get_extmarks(0, ghost_ns, 0, -1, { details = true })) do
    local chunks = m[4].virt_text or {}
    if #chunks > 0 then
      return table.concat(vim.tbl_map(function(c)
        return c[1]
      end, chunks))
    end
  end
end

local function line(n)
  return api.nvim_buf_get_lines(0, n - 1, n, true)[1]
end

local function wait_ghost(row, not_this)
  local text
  vim.wait(spec.ghost_ms, function()
    text = ghost()
    local marks = api.nvim_buf_get_extmarks(0, ghost_ns, 0, -1, {})
    return text ~= nil and marks[1] and marks[1][2] == row - 1 and text ~= not_this
  end, 10)
  return text
end

local function ghost_step(g)
  local record = {}
  api.nvim_win_set_cursor(0, { g.line, g.col })
  after('InsertEnter', function()
    vim.cmd('startinsert!')
  end)
  record.first = wait_ghost(g.line)
  -- back in the main loop the paste moves the cursor: CursorMovedI, on which Neovim asks again
  after('CursorMovedI', function()
    record.word_accepted = plugin.accept('word')
  end)
  record.after_word = line(g.line)
  record.rest = wait_ghost(g.line, record.first)
  local before = line(g.line)
  record.rest_accepted = plugin.accept()
  vim.wait(spec.ghost_ms, function()
    return line(g.line) ~= before
  end, 10)
  record.after_rest = line(g.line)
  -- a new line below: its ghost text, then the dismiss key's function hides it
  api.nvim_buf_set_lines(0, g.line, g.line, true, { '    z = self.' })
  api.nvim_win_set_cursor(0, { g.line + 1, 13 })
  after('CursorMovedI', function() end)
  record.next_ghost = wait_ghost(g.line + 1)
  plugin.dismiss()
  record.dismissed = vim.wait(spec.ghost_ms, function()
    return ghost() == nil
  end, 10)
  record.enabled_after_dismiss = vim.lsp.inline_completion.is_enabled({ bufnr = 0 })
  -- what the word and line keys take of a suggestion
  record.parts = {
    plugin.part('foo(value) + 1\nbar', 'line'),
    plugin.part('  foo.bar', 'word'),
    plugin.part('(value)', 'word'),
    plugin.part('\nx = 1', 'line'),
  }
  after('InsertLeave', function()
    vim.cmd('stopinsert')
  end)
  return record
end

local function next_edit_step(n)
  local record = {}
  local c = n.change
  api.nvim_buf_set_text(0, c[1], c[2], c[3], c[4], { c[5] })
  api.nvim_win_set_cursor(0, n.cursor)
  local answered, edit = false, nil
  next_edit.request(0, function(e)
    answered, edit = true, e
  end)
  vim.wait(spec.ghost_ms, function()
    return answered
  end, 10)
  record.answered, record.edit = answered, edit
  record.status = plugin.status()
  record.marks = #api.nvim_buf_get_extmarks(0, next_edit.ns, 0, -1, {})
  record.edited = api.nvim_buf_get_lines(0, 0, -1, true)
  local last = api.nvim_buf_line_count(0)
  api.nvim_win_set_cursor(0, { last, 0 })
  record.jumped = next_edit.accept()
  record.cursor_after_jump = api.nvim_win_get_cursor(0)
  record.still_shown = next_edit.shown()
  record.applied = next_edit.accept()
  record.lines = api.nvim_buf_get_lines(0, 0, -1, true)
  record.shown_after = next_edit.shown()
  return record
end

local function health_step()
  vim.cmd('checkhealth diffusion_lsp')
  return api.nvim_buf_get_lines(0, 0, -1, false)
end

local function main()
  vim.cmd.edit(vim.fn.fnameescape(spec.file))
  if spec.ready_ms then
    if not vim.wait(spec.ready_ms, function()
      return plugin.status() == 'diffusion: ready'
    end, 20) then
      return finish(('the plugin never said the model is ready (status %q)'):format(plugin.status()))
    end
    local client = plugin.client(0)
    result.offset_encoding = client.offset_encoding
  end
  if spec.ghost then
    result.ghost = ghost_step(spec.ghost)
  end
  if spec.next_edit then
    result.next_edit = next_edit_step(spec.next_edit)
  end
  if spec.ready_ms then
    local reply = plugin.client(0):request_sync('diffusionLsp/stats', {}, spec.ghost_ms, 0)
    result.stats = reply and reply.result
  end
  if spec.health then
    result.health = health_step()
  end
  finish(nil)
end

vim.schedule(function()
  resume(coroutine.create(main))
end)
