-- Ghost text (Neovim's vim.lsp.inline_completion) as the server and the user expect it:
--  * each suggestion shown is reported once with textDocument/didShowCompletion, the Copilot
--    notification the server counts as `shown` (Neovim sends none of its own);
--  * an answer that arrives after insert mode was left (Neovim asks 200 ms after the last key, also
--    when Esc came first) is dropped instead of drawn over normal-mode text;
--  * the ghost-text highlight gets a terminal colour when the colour scheme gave it none;
--  * on each key the shown suggestion is checked against what was typed since it was asked for: typed
--    as it goes on, the rest stays shown; anything else hides it at once (Neovim would draw it again,
--    after the new text, until the next answer: 200 ms and the server's time later). An answer to a
--    request sent before the last keys is checked the same way when it arrives.
local api = vim.api
local M = {}

local ANSWER = 'textDocument/inlineCompletion'
local DID_SHOW = 'textDocument/didShowCompletion'
local GREY = 244 -- of the 256-colour palette: a fixed mid grey (0-15 follow the terminal's theme)
local reported = {} -- bufnr -> the last item reported as shown
local asked = {} -- bufnr -> { request id -> where it was asked (anchor()) }, until its answer is handled
local shown = {} -- bufnr -> { item = as answered, at = its anchor, current = what Neovim shows of it }

--- Neovim's inline-completion capability: `active[bufnr]` is a buffer's state, whose `current` is
--- the item on screen and whose `abort()` is what Neovim itself runs on InsertLeave. Neovim 0.12
--- has no public way to learn which suggestion is shown, so this reads vim.lsp._capability; nil if
--- a later Neovim changes it (then nothing is reported, and :checkhealth says so).
local function capability()
  require('vim.lsp.inline_completion') -- registers it
  local ok, c = pcall(require, 'vim.lsp._capability')
  local class = ok and type(c.all) == 'table' and c.all.inline_completion
  return type(class) == 'table' and type(class.active) == 'table' and class or nil
end

--- Whether this Neovim lets the plugin see the shown suggestion (for :checkhealth).
function M.supported()
  return capability() ~= nil
end

--- Neovim's inline-completion state of `bufnr`, or nil.
local function active(bufnr)
  local class = capability()
  return class and class.active[bufnr]
end

--- The cursor of the window showing `bufnr` (the current one first) as 0-based (row, byte col).
local function cursor(bufnr)
  local win = api.nvim_win_get_buf(0) == bufnr and api.nvim_get_current_win() or vim.fn.bufwinid(bufnr)
  if win == -1 then
    return nil
  end
  local pos = api.nvim_win_get_cursor(win)
  return pos[1] - 1, pos[2]
end

--- Where a suggestion is asked for: the cursor, with its line's text before and after it.
local function anchor(bufnr)
  local row, col = cursor(bufnr)
  local line = row and api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1]
  return line and { row = row, col = col, head = line:sub(1, col), tail = line:sub(col + 1) } or nil
end

--- What was typed since anchor `at` and the cursor (row, col) now: the text between them, when the
--- text before `at` and after the cursor on their lines is as it was; nil after anything else (a
--- deletion, a move, a key that added text after the cursor).
local function typed(bufnr, at)
  local row, col = cursor(bufnr)
  if not row or row < at.row or (row == at.row and col < at.col) then
    return nil
  end
  local first = api.nvim_buf_get_lines(bufnr, at.row, at.row + 1, false)[1]
  local line = api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1]
  if not first or first:sub(1, at.col) ~= at.head or line:sub(col + 1) ~= at.tail then
    return nil
  end
  return table.concat(api.nvim_buf_get_text(bufnr, at.row, at.col, row, col, {}), '\n'), row, col
end

--- The suggestion `item` (asked for at `at`) once `t` is typed and the cursor is at (row, col): the
--- same item, whose text starts after what was typed (or whose range reaches over it); nil when `t`
--- is not how its text goes on, or is all of it.
local function rest(item, at, t, row, col)
  if t == '' then
    return item
  end
  local text, r = item.insert_text, item.range
  if type(text) ~= 'string' or (r and (r.start.row ~= at.row or r.start.col > at.col)) then
    return nil -- a snippet, or a range that starts elsewhere: not followed
  end
  local from = r and at.col - r.start.col or 0 -- what of the text is before the anchor
  if #text - from <= #t or text:sub(from + 1, from + #t) ~= t then
    return nil
  end
  local out = vim.tbl_extend('force', {}, item)
  if not r then
    out.insert_text = text:sub(#t + 1)
  elseif r.end_.row == at.row and r.end_.col >= at.col then -- the range ends on the anchor's line
    out.range = vim.range(r.start, vim.pos(row, col + r.end_.col - at.col, { buf = r.end_.buf }))
  elseif r.end_.row > at.row then
    out.range = vim.range(r.start, vim.pos(r.end_.row + row - at.row, r.end_.col, { buf = r.end_.buf }))
  else
    return nil
  end
  return out
end

--- Check the suggestion shown in `bufnr` against what was typed since it was asked for: show its
--- rest, or hide it.
local function recheck(bufnr)
  local c, s = active(bufnr), shown[bufnr]
  if not (c and s and c.current and c.current == s.current) then
    return -- nothing shown, or not one of this plugin's answers
  end
  local t, row, col = typed(bufnr, s.at)
  local now = t and rest(s.item, s.at, t, row, col)
  if now ~= s.current then
    shown[bufnr] = now and { item = s.item, at = s.at, current = now } or nil
    c.current = now
    c:show() -- hides what was drawn, draws `now` if any
  end
end

--- After a word or a line of the shown suggestion was accepted (its text pasted; Neovim forgets the
--- suggestion when it is accepted): show its rest at once, as when it is typed.
function M.keep(bufnr)
  local c, s = active(bufnr), shown[bufnr]
  if c and s and c.current == nil then
    c.current = s.current
    recheck(bufnr)
  end
end

--- After an answer to `client`, asked at `at`, has been handled (drawn, or not) in `bufnr`.
local function answered(bufnr, client, at)
  local c = active(bufnr)
  local item = c and c.current
  if not item then
    shown[bufnr] = nil
    return
  end
  if not api.nvim_get_mode().mode:match('^[iR]') then
    c:abort() -- late: hide it and forget it, so that the next InsertEnter does not show it again
    return
  end
  if item.client_id ~= client.id or (shown[bufnr] and shown[bufnr].current == item) then
    return -- another client's, or no new item (an error answer leaves the shown one)
  end
  shown[bufnr] = { item = item, at = at or anchor(bufnr), current = item }
  recheck(bufnr) -- keys typed while it was asked for
  if c.current and reported[bufnr] ~= item then
    reported[bufnr] = item
    client:notify(DID_SHOW, { item = { insertText = item.insert_text, command = item.command } })
  end
end

--- The ghost-text highlight (ComplHint; the default colour scheme links it to NonText, which has a
--- GUI colour only, so without 'termguicolors' ghost text looks like typed text): a terminal grey
--- added when it resolves to no terminal colour; the GUI look and a colour scheme's own are kept.
function M.highlight()
  local hl = api.nvim_get_hl(0, { name = 'ComplHint', link = false })
  if hl.ctermfg == nil then
    hl.ctermfg = GREY
    api.nvim_set_hl(0, 'ComplHint', hl)
  end
end

---@param name string the plugin's client name
function M.setup(name)
  local group = api.nvim_create_augroup('diffusion_lsp.ghost', { clear = true })
  api.nvim_create_autocmd('LspRequest', {
    group = group,
    callback = function(ev)
      local request = ev.data.request
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if request.method ~= ANSWER or not client or client.name ~= name then
        return
      end
      local bufnr, id = request.bufnr, ev.data.request_id
      if request.type == 'pending' then -- sent now, from the cursor
        asked[bufnr] = asked[bufnr] or {}
        asked[bufnr][id] = anchor(bufnr)
        return
      elseif request.type ~= 'complete' then
        return
      end
      local at = asked[bufnr] and asked[bufnr][id]
      if at then
        asked[bufnr][id] = nil
      end
      -- the answer's own handler is already queued (vim.lsp schedules it after this event): after it
      vim.schedule(function()
        if api.nvim_buf_is_valid(bufnr) then
          answered(bufnr, client, at)
        end
      end)
    end,
  })
  -- Neovim redraws the shown suggestion on CursorMovedI and TextChangedP; after it or before, the
  -- suggestion is what recheck() leaves
  api.nvim_create_autocmd({ 'CursorMovedI', 'TextChangedI', 'TextChangedP' }, {
    group = group,
    callback = function(ev)
      recheck(ev.buf)
    end,
  })
  api.nvim_create_autocmd('InsertLeave', {
    group = group,
    callback = function(ev)
      shown[ev.buf], asked[ev.buf] = nil, nil -- Neovim forgets the suggestion and its requests
    end,
  })
  api.nvim_create_autocmd('BufDelete', {
    group = group,
    callback = function(ev)
      reported[ev.buf], shown[ev.buf], asked[ev.buf] = nil, nil, nil
    end,
  })
  api.nvim_create_autocmd('ColorScheme', { group = group, callback = M.highlight })
  M.highlight()
end

return M
