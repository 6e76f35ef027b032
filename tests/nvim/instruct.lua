-- Drives one headless session for tests/test_neovim_instruct.py, after tests/nvim/plugin_init.lua:
-- through the plugin's command and keys only. Open the spec's file, wait for the plugin to say the
-- model is ready (its statusline text), then
--   accept  {line1, line2, instruction}: run :<line1>,<line2>DiffusionEdit <instruction>, wait for the
--           proposal's float, record it (its lines, title, footer, whether it has the focus), press `a`
--           in it and record the buffer;
--   prompt  {line1, line2, answer}: run the command without an instruction (vim.ui.input, stubbed to
--           answer `answer`, records its prompt), wait for the float, press `r` and record the buffer;
--   stale   {line1, line2, instruction}: wait for the float, change the buffer, press `a` and record
--           the buffer and the message.
-- Always recorded: `messages` (vim.notify). Writes the result as JSON and quits, also on failure and
-- on the watchdog (session.lua). Every wait is on a predicate (vim.wait), never a fixed sleep.
local api = vim.api
local session = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'session.lua')
local spec, result, finish, resume = session.spec, session.result, session.finish, session.resume
local instruct = require('diffusion_lsp.instruct')

result.messages = {}
local notify = vim.notify
vim.notify = function(msg, level, opts)
  table.insert(result.messages, { msg, level or vim.log.levels.INFO })
  return notify(msg, level, opts)
end

--- Run the command and wait for its float -> what the float shows, or nil and why.
local function proposal(command)
  local before = #result.messages
  vim.cmd(command)
  local ok = vim.wait(spec.reply_ms, function()
    if instruct.shown() then
      return true
    end
    for i = before + 1, #result.messages do
      if result.messages[i][2] >= vim.log.levels.WARN then
        return true
      end
    end
    return false
  end, 10)
  local s = instruct.shown()
  if not ok or not s then
    return nil, ('no proposal for %q within %d ms; messages: %s'):format(command, spec.reply_ms,
      vim.inspect(result.messages))
  end
  local cfg = api.nvim_win_get_config(s.win)
  local function text(chunks)
    return type(chunks) == 'table' and table.concat(vim.tbl_map(function(c) return c[1] end, chunks)) or chunks
  end
  return { lines = api.nvim_buf_get_lines(s.buf, 0, -1, true), filetype = vim.bo[s.buf].filetype,
    title = text(cfg.title), footer = text(cfg.footer), focused = api.nvim_get_current_win() == s.win,
    relative = cfg.relative }
end

local function press(key)
  api.nvim_feedkeys(api.nvim_replace_termcodes(key, true, false, true), 'x', false)
end

local function main()
  vim.cmd.edit(vim.fn.fnameescape(spec.file))
  local plugin = require('diffusion_lsp')
  if not vim.wait(spec.ready_ms, function()
    return plugin.status() == 'diffusion: ready'
  end, 20) then
    return finish(('the model did not load within %d ms (the plugin says %q)'):format(spec.ready_ms, plugin.status()))
  end
  local client = plugin.client(0)
  local bufnr = api.nvim_get_current_buf()
  result.offset_encoding = client.offset_encoding

  local a = spec.accept
  local shown, err = proposal(('%d,%dDiffusionEdit %s'):format(a.line1, a.line2, a.instruction))
  if not shown then
    return finish(err)
  end
  press('a')
  result.accept = { shown = shown, lines = api.nvim_buf_get_lines(bufnr, 0, -1, true),
    closed = instruct.shown() == nil, back_in_buffer = api.nvim_get_current_buf() == bufnr }

  local p = spec.prompt
  local prompts = {}
  vim.ui.input = function(opts, on_confirm)
    prompts[#prompts + 1] = opts.prompt
    on_confirm(p.answer)
  end
  local before = api.nvim_buf_get_lines(bufnr, 0, -1, true)
  shown, err = proposal(('%d,%dDiffusionEdit'):format(p.line1, p.line2))
  if not shown then
    return finish(err)
  end
  press('r')
  result.prompt = { prompts = prompts, shown = shown, unchanged = vim.deep_equal(before,
    api.nvim_buf_get_lines(bufnr, 0, -1, true)), closed = instruct.shown() == nil }

  local st = spec.stale
  shown, err = proposal(('%d,%dDiffusionEdit %s'):format(st.line1, st.line2, st.instruction))
  if not shown then
    return finish(err)
  end
  api.nvim_buf_set_lines(bufnr, 0, 0, true, { '# changed meanwhile' })
  local n = #result.messages
  press('a')
  result.stale = { lines = api.nvim_buf_get_lines(bufnr, 0, -1, true),
    messages = vim.list_slice(result.messages, n + 1) }
  finish(nil)
end

vim.schedule(function()
  resume(coroutine.create(main))
end)
