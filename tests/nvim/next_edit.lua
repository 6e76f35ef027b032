-- Drives one headless Neovim session for tests/test_neovim_next_edit.py, after tests/nvim/init.lua:
-- open the spec's file, wait for the model to load, make the spec's edit with nvim_buf_set_text (so
-- didChange goes out), request textDocument/copilotInlineEdit through vim.lsp for the current
-- version, then for the version before it and for the opened one (both stale), apply the one edit with
-- vim.lsp.util.apply_text_edits and record the buffer. Writes the result as JSON and quits, also on
-- failure and on the watchdog. Every wait is on an event or a predicate (vim.wait), never a fixed sleep.
--
--   DIFFUSION_LSP_SPEC: JSON file {file, result, ready_ms, reply_ms, watchdog_ms, position = {line, character},
--                                  change = {start_row, start_col, end_row, end_col, text} (0-based)}
local api = vim.api
local session = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'session.lua')
local spec, result, finish, resume = session.spec, session.result, session.finish, session.resume
local NEXT_EDIT = 'textDocument/copilotInlineEdit'

--- Send copilotInlineEdit for `version` through vim.lsp and wait for its reply: result, or nil and why.
local function ask(client, bufnr, version)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr), version = version },
    position = { line = spec.position.line, character = spec.position.character },
  }
  local reply
  local ok = client:request(NEXT_EDIT, params, function(err, res)
    reply = { err = err, res = res }
  end, bufnr)
  if not ok then
    return nil, 'client:request refused ' .. NEXT_EDIT
  end
  if not vim.wait(spec.reply_ms, function()
    return reply ~= nil
  end, 10) then
    return nil, ('no reply to %s within %d ms'):format(NEXT_EDIT, spec.reply_ms)
  end
  if reply.err then
    return nil, NEXT_EDIT .. ' failed: ' .. vim.inspect(reply.err)
  end
  return reply.res
end

local function main()
  local client = session.open(spec.reply_ms)
  if not client then
    return
  end
  local bufnr = api.nvim_get_current_buf()
  result.offset_encoding = client.offset_encoding
  result.opened_version = vim.lsp.util.buf_versions[bufnr]

  local c = spec.change
  api.nvim_buf_set_text(bufnr, c.start_row, c.start_col, c.end_row, c.end_col, { c.text })
  result.edited = api.nvim_buf_get_lines(bufnr, 0, -1, true)
  local version = vim.lsp.util.buf_versions[bufnr]
  result.version = version
  if version == result.opened_version then
    return finish('the buffer version did not move with nvim_buf_set_text')
  end

  -- client:request flushes the pending (debounced) didChange before it sends the request
  local res, err = ask(client, bufnr, version)
  result.reply = res
  if not res then
    return finish(err)
  end
  local stale, stale_err = ask(client, bufnr, version - 1)
  result.stale = stale
  if not stale then
    return finish(stale_err)
  end
  -- Neovim's didOpen carries version 0 and a change the buffer's changedtick, so version - 1 was
  -- never sent: ask also for the version the server did see before the change
  local opened, opened_err = ask(client, bufnr, result.opened_version)
  result.stale_opened = opened
  if not opened then
    return finish(opened_err)
  end
  if type(res.edits) ~= 'table' or #res.edits ~= 1 then
    return finish('expected exactly one edit, got ' .. vim.inspect(res))
  end
  local e = res.edits[1]
  if e.textDocument.version ~= version then
    local got = vim.inspect(e.textDocument.version)
    return finish(('the edit is for version %s, the buffer is at %d'):format(got, version))
  end
  vim.lsp.util.apply_text_edits({ { range = e.range, newText = e.text } }, bufnr, client.offset_encoding)
  result.lines = api.nvim_buf_get_lines(bufnr, 0, -1, true)
  result.applied_version = vim.lsp.util.buf_versions[bufnr]
  local stats = client:request_sync('diffusionLsp/stats', {}, spec.reply_ms, bufnr)
  result.stats = stats and stats.result
  finish(nil)
end

vim.schedule(function()
  resume(coroutine.create(main))
end)
