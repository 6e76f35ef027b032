-- Edit from an instruction (:[range]DiffusionEdit [instruction]): the lines are rewritten by the
-- server (diffusionLsp/editWithInstruction) as the instruction says, and the proposal is shown as a
-- unified diff in a floating window (filetype diff) under the lines. `a` accepts it: the server's
-- WorkspaceEdit, applied with vim.lsp.util.apply_workspace_edit and the client's offset encoding,
-- only while the buffer is at the version the proposal was made for. `r`, `q` or <Esc> rejects it,
-- and so does leaving the window or a newer request; a rejected proposal changes nothing.
local api = vim.api
local M = {}

local METHOD = 'diffusionLsp/editWithInstruction'
local CANCELLED = -32800 -- LSP RequestCancelled: superseded by a newer request for the buffer
local ACCEPT, REJECT = { 'a' }, { 'r', 'q', '<Esc>' } -- in the proposal's window
local shown -- the proposal on screen: { win, buf, bufnr, client_id, version, result }

local function plugin()
  return require('diffusion_lsp')
end

--- "line 3" or "lines 3–6".
local function label(line1, line2)
  return line1 == line2 and ('line ' .. line1) or ('lines %d–%d'):format(line1, line2)
end

--- The LSP range of lines line1..line2 (1-based, inclusive) of a buffer: from the first's start to
--- the last's end, its line break left out (the server keeps the selection's trailing breaks).
function M.range(bufnr, line1, line2, encoding)
  local last = api.nvim_buf_get_lines(bufnr, line2 - 1, line2, true)[1]
  return { start = { line = line1 - 1, character = 0 },
    ['end'] = { line = line2 - 1, character = vim.str_utfindex(last, encoding) } }
end

--- The unified diff of the lines `old` -> the text `new`, its hunk headers numbered as the buffer's
--- lines (the first being line `first`).
function M.diff(old, new, first)
  local a = table.concat(old, '\n') .. '\n'
  local b = new .. '\n'
  local out = {}
  for _, l in ipairs(vim.split(vim.text.diff(a, b, { result_type = 'unified', ctxlen = 3 }), '\n', { plain = true })) do
    local s1, n1, s2, n2 = l:match('^@@ %-(%d+),?(%d*) %+(%d+),?(%d*) @@')
    if s1 then
      local function at(s, n)
        return tostring(tonumber(s) + first - 1) .. (n ~= '' and (',' .. n) or '')
      end
      l = ('@@ -%s +%s @@'):format(at(s1, n1), at(s2, n2))
    end
    if l ~= '' then
      out[#out + 1] = l
    end
  end
  return out
end

--- The proposal on screen, or nil.
function M.shown()
  return shown
end

local function close()
  local s = shown
  shown = nil
  if s and api.nvim_win_is_valid(s.win) then
    api.nvim_win_close(s.win, true)
  end
  return s
end

--- Reject the shown proposal: the buffer stays as it is.
function M.reject()
  return close() ~= nil
end

--- Apply the shown proposal; false when none is shown, its client has gone, or the buffer has changed
--- since it was made (said so).
function M.accept()
  local s = close()
  if not s then
    return false
  end
  local client = vim.lsp.get_client_by_id(s.client_id)
  if not client or not api.nvim_buf_is_valid(s.bufnr) then
    vim.notify('diffusion-lsp: the buffer or its server has gone; nothing applied', vim.log.levels.WARN)
    return false
  end
  if vim.lsp.util.buf_versions[s.bufnr] ~= s.version then
    vim.notify('diffusion-lsp: the buffer changed since the proposal; nothing applied (ask again)', vim.log.levels.WARN)
    return false
  end
  vim.lsp.util.apply_workspace_edit(s.result.edit, client.offset_encoding)
  return true
end

--- Show a proposal for lines line1..line2 of `bufnr` in a float under them.
function M.show(bufnr, client, version, line1, line2, result, instruction)
  close()
  local old = api.nvim_buf_get_lines(bufnr, line1 - 1, line2, true)
  local lines = M.diff(old, result.newText, line1)
  if #lines == 0 then
    return vim.notify('diffusion-lsp: the model proposes no change to ' .. label(line1, line2))
  end
  api.nvim_echo({ { '' } }, false, {}) -- "rewriting …" is over
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].filetype = 'diff'
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = 'wipe'
  local width = 20
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l))
  end
  local said = instruction:gsub('%s+', ' ')
  local source = vim.fn.bufwinid(bufnr) -- under the lines where the buffer is shown
  local anchor = source ~= -1 and { relative = 'win', win = source, bufpos = { line2 - 1, 0 }, row = 1, col = 0 }
    or { relative = 'editor', row = 1, col = 0 }
  local win = api.nvim_open_win(buf, true, vim.tbl_extend('force', anchor, {
    width = math.min(width + 1, vim.o.columns - 4), height = math.min(#lines, math.max(vim.o.lines - 6, 3)),
    border = 'rounded', style = 'minimal',
    title = ' diffusion-lsp: ' .. vim.fn.strcharpart(said, 0, 50) .. ' ', title_pos = 'left',
    footer = ' a accept · r reject ', footer_pos = 'right',
  }))
  shown = { win = win, buf = buf, bufnr = bufnr, client_id = client.id, version = version, result = result }
  for _, key in ipairs(ACCEPT) do
    vim.keymap.set('n', key, M.accept, { buffer = buf, nowait = true, desc = 'diffusion-lsp: accept the proposal' })
  end
  for _, key in ipairs(REJECT) do
    vim.keymap.set('n', key, M.reject, { buffer = buf, nowait = true, desc = 'diffusion-lsp: reject the proposal' })
  end
  api.nvim_create_autocmd('WinLeave', { buffer = buf, once = true, callback = function()
    if shown and shown.win == win then
      vim.schedule(M.reject) -- a window cannot close while it is being left
    end
  end })
end

--- :[range]DiffusionEdit [instruction]: lines line1..line2 of the current buffer rewritten as the
--- instruction says (asked for with vim.ui.input when empty), the proposal shown when it comes.
function M.edit(line1, line2, instruction)
  local bufnr = api.nvim_get_current_buf()
  local client = plugin().client(bufnr)
  if not client then
    return vim.notify('diffusion-lsp is not attached to this buffer', vim.log.levels.WARN)
  end
  if not instruction or not instruction:match('%S') then
    return vim.ui.input({ prompt = 'diffusion-lsp: edit ' .. label(line1, line2) .. ': ' }, function(said)
      if said and said:match('%S') then
        vim.cmd.redraw() -- off the prompt's line, so that the next message has a line of its own
        M.edit(line1, line2, said)
      end
    end)
  end
  local version = vim.lsp.util.buf_versions[bufnr]
  local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr), version = version },
    range = M.range(bufnr, line1, line2, client.offset_encoding), instruction = instruction }
  vim.notify(('diffusion-lsp: rewriting %s…'):format(label(line1, line2)))
  -- client:request sends the buffer's pending (debounced) changes first
  client:request(METHOD, params, function(err, result)
    if err then
      if err.code ~= CANCELLED then
        vim.notify('diffusion-lsp: ' .. err.message, vim.log.levels.ERROR)
      end
      return
    end
    if not api.nvim_buf_is_valid(bufnr) or vim.lsp.util.buf_versions[bufnr] ~= version then
      return vim.notify('diffusion-lsp: the buffer changed while the model worked; nothing to show',
        vim.log.levels.WARN)
    end
    M.show(bufnr, client, version, line1, line2, result, instruction)
  end, bufnr)
end

return M
