-- Next-edit suggestions (the server's textDocument/copilotInlineEdit): asked for after changes pause,
-- drawn with extmarks (the words it removes highlighted as a deletion, what it writes as inline virtual
-- text, or virtual lines where it adds lines), reported to the server as shown
-- (textDocument/didShowInlineEdit), and cleared when the cursor moves or the text changes (asked again
-- once changes pause, and on leaving insert mode). The statusline is redrawn when one is shown or cleared. The accept key jumps to an edit away from the cursor
-- first, then applies it with vim.lsp.util.apply_text_edits, leaves the cursor at the end of the applied text and
-- runs its accept command.
local api = vim.api
local M = {}

local METHOD = 'textDocument/copilotInlineEdit'
M.ns = api.nvim_create_namespace('diffusion_lsp.next_edit')
local state = {} -- bufnr -> { edit, client_id, version, jumping }
local timers = {} -- bufnr -> uv timer

local function plugin()
  return require('diffusion_lsp')
end

--- The removed words' highlight: the colour scheme's DiffDelete, struck through, so a removed word
--- never reads as part of the new one drawn right after it (a user's own DiffusionLspDelete is kept).
local function highlight()
  if vim.tbl_isempty(api.nvim_get_hl(0, { name = 'DiffusionLspDelete' })) then
    local hl = api.nvim_get_hl(0, { name = 'DiffDelete', link = false })
    hl.strikethrough = true
    hl.cterm = vim.tbl_extend('force', hl.cterm or {}, { strikethrough = true }) -- a terminal without termguicolors
    hl.default = true
    api.nvim_set_hl(0, 'DiffusionLspDelete', hl)
  end
end

local function buf(bufnr)
  return (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
end

function M.shown(bufnr)
  return state[buf(bufnr)] ~= nil
end

--- The shown edit of a buffer, or nil.
function M.current(bufnr)
  local s = state[buf(bufnr)]
  return s and s.edit
end

--- The statusline says whether a next edit is shown: redraw it when that changes.
local function redraw_status()
  pcall(vim.cmd, 'redrawstatus!')
end

function M.clear(bufnr)
  bufnr = buf(bufnr)
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
  local was = state[bufnr] ~= nil
  state[bufnr] = nil
  if was then
    redraw_status()
  end
end

--- (row, byte col) of an LSP position in the buffer.
local function pos(bufnr, p, encoding)
  local line = api.nvim_buf_get_lines(bufnr, p.line, p.line + 1, false)[1] or ''
  return p.line, vim.str_byteindex(line, encoding, p.character, false)
end

--- A line split into words (runs of letters, digits and _) and single characters.
local function tokens(line)
  local out, i = {}, 1
  while i <= #line do
    local t = line:match('^[%w_]+', i) or line:sub(i, i)
    out[#out + 1] = t
    i = i + #t
  end
  return out
end

--- Tokens as the lines vim.diff compares; none: no line at all (not one empty line).
local function as_lines(toks)
  return #toks > 0 and (table.concat(toks, '\n') .. '\n') or ''
end

--- Byte offset in a line of the end of its first `n` tokens.
local function upto(toks, n)
  local b = 0
  for k = 1, n do
    b = b + #toks[k]
  end
  return b
end

--- Draw an edit that keeps the number of lines word by word: on each changed line only the words it
--- removes are highlighted, and what it writes goes inline where they were (a rename's sites read as
--- renames, not as a block rewritten). False when the line counts differ.
local function draw_words(bufnr, srow, scol, erow, ecol, new_lines)
  local old = api.nvim_buf_get_text(bufnr, srow, scol, erow, ecol, {})
  if #old ~= #new_lines then
    return false
  end
  for i = 1, #old do
    if old[i] ~= new_lines[i] then
      local row, base = srow + i - 1, i == 1 and scol or 0
      local ta, tb = tokens(old[i]), tokens(new_lines[i])
      local hunks = vim.diff(as_lines(ta), as_lines(tb), { result_type = 'indices' })
      for _, h in ipairs(hunks) do
        local sa, ca, sb, cb = h[1], h[2], h[3], h[4]
        local from = base + upto(ta, ca > 0 and sa - 1 or sa)
        local to = base + upto(ta, ca > 0 and sa + ca - 1 or sa)
        if ca > 0 then
          api.nvim_buf_set_extmark(bufnr, M.ns, row, from, { end_row = row, end_col = to, hl_group = 'DiffusionLspDelete' })
        end
        if cb > 0 then
          local text = table.concat(tb, '', sb, sb + cb - 1)
          api.nvim_buf_set_extmark(bufnr, M.ns, row, to, { virt_text = { { text, 'DiffAdd' } }, virt_text_pos = 'inline' })
        end
      end
    end
  end
  return true
end

local function draw(bufnr, edit, encoding)
  highlight()
  local srow, scol = pos(bufnr, edit.range.start, encoding)
  local erow, ecol = pos(bufnr, edit.range['end'], encoding)
  local lines = vim.split(edit.text, '\n', { plain = true })
  if (srow ~= erow or scol ~= ecol) and draw_words(bufnr, srow, scol, erow, ecol, lines) then
    return
  end
  if srow ~= erow or scol ~= ecol then -- what the edit removes
    api.nvim_buf_set_extmark(bufnr, M.ns, srow, scol, { end_row = erow, end_col = ecol, hl_group = 'DiffusionLspDelete' })
  end
  if edit.text ~= '' then -- what it writes: the first line inline, the others as lines below
    local virt_lines = {}
    for i = 2, #lines do
      virt_lines[#virt_lines + 1] = { { lines[i], 'DiffAdd' } }
    end
    api.nvim_buf_set_extmark(bufnr, M.ns, erow, ecol, {
      virt_text = lines[1] ~= '' and { { lines[1], 'DiffAdd' } } or nil,
      virt_text_pos = 'inline',
      virt_lines = #virt_lines > 0 and virt_lines or nil,
    })
  end
end

--- Show an edit from the server (one element of the result's `edits`).
--- A hint at the end of the cursor's line naming an edit the cursor is not on (a jump: it may be
--- off screen), and the key that jumps there.
local function hint(bufnr, edit)
  local row = api.nvim_win_get_cursor(0)[1] - 1
  if api.nvim_win_get_buf(0) ~= bufnr or (row >= edit.range.start.line and row <= edit.range['end'].line) then
    return nil
  end
  local key = ((plugin().config or {}).keymaps or {}).next_edit
  local text = ('  next edit at line %d%s'):format(edit.range.start.line + 1, key and (' (' .. key .. ': jump)') or '')
  return api.nvim_buf_set_extmark(bufnr, M.ns, row, 0, { virt_text = { { text, 'Comment' } }, virt_text_pos = 'eol' })
end

function M.show(bufnr, client, edit)
  bufnr = buf(bufnr)
  M.clear(bufnr)
  draw(bufnr, edit, client.offset_encoding)
  state[bufnr] = { edit = edit, client_id = client.id, version = edit.textDocument.version, hint = hint(bufnr, edit) }
  client:notify('textDocument/didShowInlineEdit', { item = { command = edit.command } })
  redraw_status()
end

--- Ask for the next edit at the cursor; `done(edit or nil)` when the answer is in (and drawn).
function M.request(bufnr, done)
  bufnr = buf(bufnr)
  local client = plugin().client(bufnr)
  if not client then
    if done then
      done(nil)
    end
    return
  end
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local version = vim.lsp.util.buf_versions[bufnr]
  params.textDocument.version = version
  client:request(METHOD, params, function(err, result)
    local edit = not err and result and result.edits and result.edits[1] or nil
    if edit and (vim.lsp.util.buf_versions[bufnr] ~= version or edit.textDocument.version ~= version) then
      edit = nil -- the buffer changed meanwhile
    end
    if edit then
      M.show(bufnr, client, edit)
    end
    if done then
      done(edit)
    end
  end, bufnr)
end

--- Ask for the next edit at the cursor because the user did (a command, a key): say so when there is none.
function M.ask(bufnr)
  if not plugin().client(buf(bufnr)) then
    return vim.notify('diffusion-lsp is not attached to this buffer', vim.log.levels.WARN)
  end
  M.request(bufnr, function(edit)
    if not edit then
      vim.notify('diffusion-lsp: no next edit here', vim.log.levels.INFO)
    end
  end)
end

--- The accept key: jump to an edit away from the cursor (the first press), else apply it. False when
--- no edit is shown.
function M.accept(bufnr)
  bufnr = buf(bufnr)
  local s = state[bufnr]
  local client = s and vim.lsp.get_client_by_id(s.client_id)
  if not s or not client or vim.lsp.util.buf_versions[bufnr] ~= s.version then
    M.clear(bufnr)
    return false
  end
  local srow, scol = pos(bufnr, s.edit.range.start, client.offset_encoding)
  local erow = s.edit.range['end'].line
  local row = api.nvim_win_get_cursor(0)[1] - 1
  if plugin().config.next_edit.jump_first and (row < srow or row > erow) then
    s.jumping = true -- this cursor move keeps the suggestion
    if s.hint then -- there now: the hint has said what it had to
      api.nvim_buf_del_extmark(bufnr, M.ns, s.hint)
      s.hint = nil
    end
    api.nvim_win_set_cursor(0, { srow + 1, scol })
    return true
  end
  local edit = s.edit
  M.clear(bufnr)
  vim.lsp.util.apply_text_edits({ { range = edit.range, newText = edit.text } }, bufnr, client.offset_encoding)
  -- the cursor goes to the end of the applied text, where the next suggestion is asked from: after
  -- it in insert mode, on its last character in normal mode
  local lines = vim.split(edit.text, '\n', { plain = true })
  local last = lines[#lines]
  local col = #lines == 1 and scol + #last or #last
  if api.nvim_get_mode().mode:sub(1, 1) ~= 'i' and #edit.text > 0 and #last > 0 then
    col = col - 1
  end
  pcall(api.nvim_win_set_cursor, 0, { srow + #lines, col })
  if edit.command then
    client:exec_cmd(edit.command, { bufnr = bufnr })
  end
  return true
end

local function schedule_request(bufnr, opts)
  local timer = timers[bufnr]
  if not timer then
    timer = assert(vim.uv.new_timer())
    timers[bufnr] = timer
  end
  timer:stop()
  timer:start(opts.debounce_ms, 0, vim.schedule_wrap(function()
    if api.nvim_buf_is_valid(bufnr) and bufnr == api.nvim_get_current_buf() then
      M.request(bufnr)
    end
  end))
end

--- Called on LspAttach: clear on cursor moves and changes, ask again once changes pause.
function M.attach(_, bufnr, opts)
  if not opts.enable then
    return
  end
  local group = api.nvim_create_augroup('diffusion_lsp.next_edit.' .. bufnr, { clear = true })
  api.nvim_create_autocmd({ 'CursorMoved', 'CursorMovedI' }, {
    group = group,
    buffer = bufnr,
    callback = function()
      local s = state[bufnr]
      if s and s.jumping then
        s.jumping = false
      elseif s then
        M.clear(bufnr)
      end
    end,
  })
  api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI' }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.clear(bufnr)
      if opts.auto then
        schedule_request(bufnr, opts)
      end
    end,
  })
  if opts.auto then -- leaving insert mode moves the cursor, which clears the edit: ask again there
    api.nvim_create_autocmd('InsertLeave', {
      group = group,
      buffer = bufnr,
      callback = function()
        schedule_request(bufnr, opts)
      end,
    })
  end
  api.nvim_create_autocmd({ 'BufDelete', 'LspDetach' }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.clear(bufnr)
      if timers[bufnr] then
        timers[bufnr]:close()
        timers[bufnr] = nil
      end
    end,
  })
end

return M
