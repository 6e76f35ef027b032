-- Drives one headless session for tests/test_neovim_plugin.py, after tests/nvim/plugin_init.lua:
-- through the plugin's own functions and commands only. It waits for the statusline to be drawn
-- with spec.state ("diffusion: ready" unless given) when the spec has ready_ms. Steps, each when the
-- spec has it:
--   ghost     {line (1-based), col, want, rest}: insert at the end of that line, wait for the ghost text
--             `want`, accept a word (require('diffusion_lsp').accept('word')), wait for the ghost text
--             `rest`, accept it; record the line after each
--   typing    [{line, col, append, want}]: a key that does not go on with the ghost text hides it at
--             once, one that does leaves the rest, which is accepted at once (typing_step)
--   fake      use the stand-in server of fake_server.lua instead of the command plugin_init.lua gave
--   late_key  [{line, col, append, text, key}]: with the stand-in server (spec.fake), a key typed while
--             Neovim's request is out, then the answer `text`, for the text before the key (late_key_step)
--   leave     {line}: insert at the end of that line, wait for the ghost text and for its report
--             (didShowCompletion), leave insert mode; enter and leave again before Neovim asks (it
--             asks 200 ms after a key) and wait for that late answer to be handled; enter insert mode
--             on line 1; record the ghost text after each
--   no_edit   run :DiffusionLspNextEdit and wait for its message
--   next_edit {change = {start_row, start_col, end_row, end_col, text}, cursor = {line, col}}: make the
--             change, ask for the next edit, record what is drawn, move to the last line, press the
--             accept key twice (jump, then apply) and record the buffer
--   highlight with 'notermguicolors': the ghost-text highlight, also after :colorscheme default and
--             after the user gave it a terminal colour of their own
--   health    run :checkhealth diffusion_lsp and record its lines
--   notice    wait for a message with spec.notice in it; record :messages and the echo space
--   wide      window/showMessage lines about as wide as the echo space, through the plugin's handler:
--             one that fits only without Neovim's `LSP[name] ` prefix, one that fits with it; record
--             what was shown of each
-- Always recorded: `messages` (vim.notify, which shows window/showMessage too), `statusline` (each
-- value the statusline was drawn with, in order, repeats left out) and `sent` (notifications the
-- client sent, by method). Writes the result as JSON and quits, also on failure and on the watchdog
-- (session.lua).
local api = vim.api
local here = debug.getinfo(1, 'S').source:sub(2):match('(.*/)')
local session = dofile(here .. 'session.lua')
local fake = dofile(here .. 'fake_server.lua')
local spec, result, finish, resume, after = session.spec, session.result, session.finish, session.resume,
  session.after
local plugin = require('diffusion_lsp')
local next_edit = require('diffusion_lsp.next_edit')
local ghost_ns = api.nvim_create_namespace('nvim.lsp.inline_completion')
local ANSWER = 'textDocument/inlineCompletion'

result.messages, result.statusline, result.sent = {}, {}, {}
local notify = vim.notify
vim.notify = function(msg, level, opts)
  table.insert(result.messages, { msg, level or vim.log.levels.INFO })
  return notify(msg, level, opts)
end

--- The statusline, as drawn: a statusline expression is evaluated only when it is redrawn.
function _G.diffusion_test_statusline()
  local text = plugin.status()
  if result.statusline[#result.statusline] ~= text then
    table.insert(result.statusline, text)
  end
  return text
end
vim.o.laststatus = 2
vim.o.statusline = '%!v:lua.diffusion_test_statusline()'

local requests = {} -- inline completion requests in the order sent: { id, mode when sent, handled }
api.nvim_create_autocmd('LspRequest', {
  callback = function(ev)
    local r = ev.data.request
    if r.method ~= ANSWER then
      return
    end
    if r.type == 'pending' then
      table.insert(requests, { id = ev.data.request_id, mode = api.nvim_get_mode().mode })
    elseif r.type == 'complete' then
      -- the answer's handler, then the plugin's own look at it, are queued already: after both
      vim.schedule(function()
        vim.schedule(function()
          for _, q in ipairs(requests) do
            if q.id == ev.data.request_id then
              q.handled = true
            end
          end
        end)
      end)
    end
  end,
})

--- Count the notifications the client sends (the server's feedback).
local function spy(client)
  local send = client.notify
  client.notify = function(self, method, params)
    result.sent[method] = (result.sent[method] or 0) + 1
    return send(self, method, params)
  end
end

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

--- Wait until the ghost text is drawn on `row` (1-based), is not `not_this` and, when `want` is given,
--- is `want`: the ghost text then (or at the deadline, for the failure message).
local function wait_ghost(row, not_this, want)
  local text
  vim.wait(spec.ghost_ms, function()
    text = ghost()
    local marks = api.nvim_buf_get_extmarks(0, ghost_ns, 0, -1, {})
    return text ~= nil and marks[1] and marks[1][2] == row - 1 and text ~= not_this and (want == nil or text == want)
  end, 10)
  return text
end

local function ghost_step(g)
  local record = {}
  api.nvim_win_set_cursor(0, { g.line, g.col })
  after('InsertEnter', function()
    vim.cmd('startinsert!')
  end)
  record.first = wait_ghost(g.line, nil, g.want)
  local typed, sent = line(g.line), #requests
  -- back in the main loop the paste moves the cursor: CursorMovedI, on which Neovim asks again
  after('CursorMovedI', function()
    record.word_accepted = plugin.accept('word')
  end)
  record.rest_at_once, record.sent_after_word = ghost(), #requests - sent -- before Neovim asks again
  vim.wait(spec.ghost_ms, function()
    return line(g.line) ~= typed
  end, 10)
  record.after_word = line(g.line)
  record.rest = wait_ghost(g.line, record.first, g.rest)
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
  record.next_ghost = wait_ghost(g.line + 1, nil, g.want)
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

local function insert(start)
  after('InsertEnter', function()
    vim.cmd(start)
  end)
end

local function leave()
  after('InsertLeave', function()
    vim.cmd('stopinsert')
  end)
end

local function leave_step(l)
  local record = {}
  api.nvim_win_set_cursor(0, { l.line, 0 })
  insert('startinsert!')
  record.ghost = wait_ghost(l.line)
  record.reported = vim.wait(spec.ghost_ms, function()
    return result.sent['textDocument/didShowCompletion'] ~= nil
  end, 10)
  leave()
  record.after_leave = ghost()
  -- in and out at once: Neovim's request (200 ms after the key) goes out in normal mode
  local late = #requests + 1
  insert('startinsert!')
  leave()
  record.late_handled = vim.wait(spec.ghost_ms, function()
    return requests[late] ~= nil and requests[late].handled
  end, 10)
  record.late_asked_in = requests[late] and requests[late].mode
  record.after_late = ghost()
  -- elsewhere in insert mode: nothing stale is shown before Neovim asks again
  api.nvim_win_set_cursor(0, { 1, 0 })
  insert('startinsert')
  record.on_enter = ghost()
  leave()
  return record
end

--- Type one key in insert mode and come back once Neovim has handled it (its autocmds have run) ->
--- how many completion requests went out meanwhile (none: Neovim asks 200 ms after a key, and a
--- timer's callback is queued behind this coroutine's resume).
local function key(k)
  local sent = #requests
  after('TextChangedI', function()
    api.nvim_feedkeys(api.nvim_replace_termcodes(k, true, false, true), 'nt', false)
  end)
  return #requests - sent
end

--- For each case {line, col, append, want}: insert there, wait for the ghost text `want`; type a key
--- it does not go on with and record what is drawn before Neovim asks again; delete it and wait for
--- `want` again; type its first character, record what is drawn, accept at once and record the line.
local function typing_step(cases)
  local out = {}
  for _, t in ipairs(cases) do
    local record = {}
    api.nvim_win_set_cursor(0, { t.line, t.col })
    insert(t.append and 'startinsert!' or 'startinsert')
    record.ghost = wait_ghost(t.line, nil, t.want)
    record.sent_after_miss = key('x')
    record.after_miss = ghost()
    record.marks_after_miss = #api.nvim_buf_get_extmarks(0, ghost_ns, 0, -1, {})
    key('<BS>')
    record.again = wait_ghost(t.line, nil, t.want)
    record.sent_after_hit = key(t.want:sub(1, 1))
    record.after_hit = ghost()
    local before = line(t.line)
    record.accepted = plugin.accept()
    vim.wait(spec.ghost_ms, function()
      return line(t.line) ~= before
    end, 10)
    record.line = line(t.line)
    leave()
    out[#out + 1] = record
  end
  return out
end

--- With the stand-in server (fake_server.lua), for each case {line, col, append, text, key}: insert
--- there, wait for Neovim's request, type `key`, then answer the request with `text` (an answer for
--- the text before the key) and record the line and what is drawn once the answer has been handled.
local function late_key_step(cases)
  local out = {}
  for _, t in ipairs(cases) do
    local text = line(t.line)
    api.nvim_win_set_cursor(0, { t.line, t.col })
    insert(t.append and 'startinsert!' or 'startinsert')
    vim.wait(spec.ghost_ms, function()
      return #fake.pending > 0
    end, 10)
    local asked = assert(table.remove(fake.pending, 1), 'Neovim sent no completion request')
    local sent = key(t.key)
    asked.answer({ items = { { insertText = t.text } } })
    local handled = vim.wait(spec.ghost_ms, function()
      return vim.iter(requests):any(function(q)
        return q.id == asked.id and q.handled
      end)
    end, 10)
    out[#out + 1] = { sent_after_key = sent, handled = handled, line = line(t.line), ghost = ghost() }
    leave()
    fake.pending = {}
    api.nvim_buf_set_lines(0, t.line - 1, t.line, true, { text })
  end
  return out
end

local function no_edit_step()
  local before = #result.messages
  vim.cmd('DiffusionLspNextEdit')
  vim.wait(spec.ghost_ms, function()
    return #result.messages > before
  end, 10)
  return vim.list_slice(result.messages, before + 1)
end

local function highlight_step()
  vim.o.termguicolors = false
  local function hl(name)
    return api.nvim_get_hl(0, { name = name, link = false })
  end
  local record = { default = hl('ComplHint'), nontext = hl('NonText'), normal = hl('Normal') }
  vim.cmd.colorscheme('default')
  record.after_colorscheme = hl('ComplHint')
  vim.cmd('highlight ComplHint ctermfg=33')
  vim.cmd('doautocmd ColorScheme')
  record.own = hl('ComplHint')
  return record
end

--- Edits drawn without a server (a client that notifies nothing): each keeps its line count, so it is
--- drawn word by word; records the highlighted spans and the inline text, or the error.
local function draw_step(edits)
  local next_edit = require('diffusion_lsp.next_edit')
  local client = { id = 0, offset_encoding = 'utf-16', notify = function() end }
  local out = {}
  for _, e in ipairs(edits) do
    api.nvim_buf_set_lines(0, 0, -1, true, { e.line })
    local edit = { text = e.text, textDocument = { version = 0 },
                   range = { start = { line = 0, character = e.from }, ['end'] = { line = 0, character = e.to } } }
    local ok, err = pcall(next_edit.show, 0, client, edit)
    local drawn = { ok = ok, err = (not ok) and tostring(err) or nil, struck = {}, written = {} }
    for _, m in ipairs(api.nvim_buf_get_extmarks(0, next_edit.ns, 0, -1, { details = true })) do
      if m[4].hl_group then
        drawn.struck[#drawn.struck + 1] = e.line:sub(m[3] + 1, m[4].end_col)
      elseif m[4].virt_text and m[4].virt_text_pos == 'inline' then
        drawn.written[#drawn.written + 1] = m[4].virt_text[1][1]
      end
    end
    next_edit.clear(0)
    out[#out + 1] = drawn
  end
  return out
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
  record.deleted_hl = {}
  for _, m in ipairs(api.nvim_buf_get_extmarks(0, next_edit.ns, 0, -1, { details = true })) do
    if m[4].hl_group then
      local hl = api.nvim_get_hl(0, { name = m[4].hl_group })
      record.deleted_hl[#record.deleted_hl + 1] = { m[4].hl_group, hl.strikethrough == true,
        (hl.cterm or {}).strikethrough == true }
    end
  end
  record.edited = api.nvim_buf_get_lines(0, 0, -1, true)
  local last = api.nvim_buf_line_count(0)
  api.nvim_win_set_cursor(0, { last, 0 })
  record.jumped = next_edit.accept()
  record.cursor_after_jump = api.nvim_win_get_cursor(0)
  record.still_shown = next_edit.shown()
  record.applied = next_edit.accept()
  record.cursor_after_apply = api.nvim_win_get_cursor(0)
  record.lines = api.nvim_buf_get_lines(0, 0, -1, true)
  record.shown_after = next_edit.shown()
  return record
end

local function wide_step()
  local client = plugin.client(0)
  local ctx = { client_id = client.id, method = 'window/showMessage' }
  local prefix = vim.fn.strdisplaywidth(('LSP[%s] '):format(client.name))
  local out = { echospace = vim.v.echospace, shown = {} }
  for _, n in ipairs({ vim.v.echospace - prefix + 3, vim.v.echospace - prefix }) do
    plugin.show_message(nil, { type = 2, message = ('w'):rep(n) }, ctx)
    table.insert(out.shown, result.messages[#result.messages][1])
  end
  return out
end

local function health_step()
  vim.cmd('checkhealth diffusion_lsp')
  return api.nvim_buf_get_lines(0, 0, -1, false)
end

local function main()
  if spec.fake then -- the stand-in server instead of the command plugin_init.lua gave
    plugin.setup({ cmd = fake.cmd, filetypes = { 'python' }, next_edit = { auto = false } })
  end
  vim.cmd.edit(vim.fn.fnameescape(spec.file))
  if spec.fake and not vim.wait(spec.ghost_ms, function()
    return plugin.client(0) ~= nil and plugin.client(0).initialized
  end, 10) then
    return finish('the stand-in server did not attach')
  end
  if spec.ready_ms then
    local state = spec.state or 'diffusion: ready'
    if not vim.wait(spec.ready_ms, function()
      return result.statusline[#result.statusline] == state
    end, 20) then
      return finish(('the statusline was never drawn with %q (now %q, the plugin says %q)'):format(
        state, result.statusline[#result.statusline], plugin.status()))
    end
    local client = plugin.client(0)
    result.offset_encoding = client.offset_encoding
    result.init_options = vim.json.encode(client.config.init_options) -- initializationOptions, as sent
    spy(client)
  end
  if spec.ghost then
    result.ghost = ghost_step(spec.ghost)
  end
  if spec.leave then
    result.leave = leave_step(spec.leave)
  end
  if spec.typing then
    result.typing = typing_step(spec.typing)
  end
  if spec.late_key then
    result.late_key = late_key_step(spec.late_key)
  end
  if spec.no_edit then
    result.no_edit = no_edit_step()
  end
  if spec.next_edit then
    result.next_edit = next_edit_step(spec.next_edit)
  end
  if spec.ready_ms then
    local reply = plugin.client(0):request_sync('diffusionLsp/stats', {}, spec.ghost_ms, 0)
    result.stats = reply and reply.result
  end
  if spec.highlight then
    result.highlight = highlight_step()
  end
  if spec.draw then
    result.draw = draw_step(spec.draw)
  end
  if spec.health then
    result.health = health_step()
  end
  if spec.wide then
    result.wide = wide_step()
  end
  if spec.notice then
    vim.wait(spec.ghost_ms, function()
      return vim.iter(result.messages):any(function(m)
        return m[1]:find(spec.notice, 1, true) ~= nil
      end)
    end, 20)
    result.history, result.echospace = vim.fn.execute('messages'), vim.v.echospace
  end
  finish(nil)
end

vim.schedule(function()
  resume(coroutine.create(main))
end)
