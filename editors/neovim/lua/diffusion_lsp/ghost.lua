-- Ghost text (Neovim's vim.lsp.inline_completion) as the server and the user expect it:
--  * each suggestion shown is reported once with textDocument/didShowCompletion, the Copilot
--    notification the server counts as `shown` (Neovim sends none of its own);
--  * an answer that arrives after insert mode was left (Neovim asks 200 ms after the last key, also
--    when Esc came first) is dropped instead of drawn over normal-mode text;
--  * the ghost-text highlight gets a terminal colour when the colour scheme gave it none.
local api = vim.api
local M = {}

local ANSWER = 'textDocument/inlineCompletion'
local DID_SHOW = 'textDocument/didShowCompletion'
local GREY = 244 -- of the 256-colour palette: a fixed mid grey (0-15 follow the terminal's theme)
local reported = {} -- bufnr -> the last item reported as shown

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

--- After an answer to `client` has been handled (drawn, or not) in `bufnr`.
local function answered(bufnr, client)
  local class = capability()
  local c = class and class.active[bufnr]
  local item = c and c.current
  if not item then
    return
  end
  if not api.nvim_get_mode().mode:match('^[iR]') then
    c:abort() -- late: hide it and forget it, so that the next InsertEnter does not show it again
    return
  end
  if item.client_id == client.id and reported[bufnr] ~= item then
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
      if request.type ~= 'complete' or request.method ~= ANSWER or not client or client.name ~= name then
        return
      end
      -- the answer's own handler is already queued (vim.lsp schedules it after this event): after it
      vim.schedule(function()
        if api.nvim_buf_is_valid(request.bufnr) then
          answered(request.bufnr, client)
        end
      end)
    end,
  })
  api.nvim_create_autocmd('BufDelete', {
    group = group,
    callback = function(ev)
      reported[ev.buf] = nil
    end,
  })
  api.nvim_create_autocmd('ColorScheme', { group = group, callback = M.highlight })
  M.highlight()
end

return M
