-- diffusion-lsp for Neovim 0.12: starts `diffusion-lsp serve` with the built-in LSP client, turns on
-- native inline completion (ghost text), adds keys to accept all / a word / a line and to dismiss,
-- and renders next-edit suggestions (next_edit.lua). ghost.lua reports the shown ghost text to the
-- server and keeps it to insert mode; status.lua follows the model's state for the statusline. No
-- other plugin needed.
local M = {}

M.name = 'diffusion_lsp'
local CREATE_PROGRESS = 'window/workDoneProgress/create' -- the server's first word of a model load

---@class diffusion_lsp.Config
local defaults = {
  cmd = { 'diffusion-lsp', 'serve' }, -- e.g. { '/path/to/venv/bin/diffusion-lsp', 'serve', '--model', DIR }
  filetypes = { 'python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'rust', 'go',
    'java', 'c', 'cpp' },
  root_markers = { '.git', 'pyproject.toml', 'package.json', 'Cargo.toml', 'go.mod' },
  settings = {}, -- the server's settings (initializationOptions), e.g. { nextEdit = { mode = 'full' } }
  inline_completion = true, -- turn on vim.lsp.inline_completion for the filetypes' buffers
  keymaps = { -- insert mode, except next_edit (normal mode); false turns one off
    accept = '<Tab>', -- falls back to a plain <Tab> when no suggestion is shown
    accept_word = '<M-w>',
    accept_line = '<M-l>',
    dismiss = '<C-]>',
    next_edit = '<M-CR>', -- normal mode: jump to the suggested edit, then apply it
  },
  next_edit = {
    enable = true,
    auto = true, -- ask after each change, once changes pause for debounce_ms
    debounce_ms = 300,
    jump_first = true, -- an edit away from the cursor: the key jumps there first, then applies
  },
}

M.config = vim.deepcopy(defaults)

--- The first running client of this plugin for a buffer, or nil.
function M.client(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr or 0, name = M.name })[1]
end

local function insert_text(item)
  return type(item.insert_text) == 'string' and item.insert_text or item.insert_text.value
end

--- The part of a suggestion one key accepts: a word (with the spaces before it), or up to the end of
--- the first line (its line break too when the line is empty).
function M.part(text, kind)
  if kind == 'word' then
    return text:match('^%s*[%w_]+') or text:match('^%s*[^%w_%s]+') or text:match('^%s+') or text
  end
  return text:match('^([^\n]+)') or text:match('^\n') or text
end

--- Accept the shown suggestion in whole (kind nil), or its first word or line; false when none is shown.
function M.accept(kind)
  if not kind then
    return vim.lsp.inline_completion.get()
  end
  return vim.lsp.inline_completion.get({
    on_accept = function(item)
      local part = M.part(insert_text(item), kind)
      vim.api.nvim_paste(part, false, -1) -- at the cursor
      require('diffusion_lsp.ghost').keep(vim.api.nvim_get_current_buf()) -- the rest, until the next answer
      local client = vim.lsp.get_client_by_id(item.client_id)
      if client then
        client:notify('textDocument/didPartiallyAcceptCompletion', { acceptedLength = #part })
      end
    end,
  })
end

--- Hide the suggestion; completions come back with the next change or the next insert.
function M.dismiss(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  vim.lsp.inline_completion.enable(false, { bufnr = bufnr })
  vim.api.nvim_create_autocmd({ 'TextChangedI', 'InsertLeave' }, {
    buffer = bufnr,
    once = true,
    callback = function()
      vim.lsp.inline_completion.enable(M.config.inline_completion, { bufnr = bufnr })
    end,
  })
end

--- For the statusline: "diffusion: " and the model's state (starting, loading, ready, stopped or
--- failed; status.lua), "diffusion: next edit" while one is shown, or "" when not attached.
function M.status(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  -- a client that has not answered `initialize` yet is attached already, but get_clients() hides it
  local client = vim.lsp.get_clients({ bufnr = bufnr, name = M.name, _uninitialized = true })[1]
  if not client then
    return ''
  end
  if require('diffusion_lsp.next_edit').shown(bufnr) then
    return 'diffusion: next edit'
  end
  return 'diffusion: ' .. require('diffusion_lsp.status').state(client.id)
end

local function map(mode, lhs, rhs, desc, opts)
  if lhs then
    vim.keymap.set(mode, lhs, rhs, vim.tbl_extend('force', { desc = desc }, opts or {}))
  end
end

local function keymaps(k)
  map('i', k.accept, function()
    if not M.accept() then
      return k.accept == '<Tab>' and '<Tab>' or ''
    end
  end, 'diffusion-lsp: accept the suggestion', { expr = true })
  map('i', k.accept_word, function()
    M.accept('word')
  end, 'diffusion-lsp: accept a word')
  map('i', k.accept_line, function()
    M.accept('line')
  end, 'diffusion-lsp: accept a line')
  map('i', k.dismiss, function()
    M.dismiss()
  end, 'diffusion-lsp: dismiss the suggestion')
  map('n', k.next_edit, function()
    if not require('diffusion_lsp.next_edit').accept() then
      require('diffusion_lsp.next_edit').ask()
    end
  end, 'diffusion-lsp: go to / apply the next edit (ask for one when none is shown)')
end

--- window/showMessage without a hit-enter prompt: a message wider than the command line (the first
--- start's word about the demo model has a link in it) goes whole to :messages, and the screen shows
--- what fits, pointing there.
function M.show_message(err, result, ctx)
  local msg = result and result.message or ''
  local room = vim.v.echospace
  -- Neovim's own handler prints it as `LSP[name] message`: that whole line must fit
  local client = ctx and vim.lsp.get_client_by_id(ctx.client_id)
  local shown = ('LSP[%s] %s'):format(client and client.name or ('id=' .. tostring(ctx and ctx.client_id)), msg)
  if msg:find('\n') or vim.fn.strdisplaywidth(shown) <= room then
    return vim.lsp.handlers['window/showMessage'](err, result, ctx)
  end
  -- into :messages without the prompt: for this one echo, 'messagesopt' waits 0 ms instead
  local old = vim.o.messagesopt
  vim.o.messagesopt = old:gsub('hit%-enter', 'wait:0')
  vim.api.nvim_echo({ { msg } }, true, {})
  vim.cmd.redraw()
  vim.o.messagesopt = old
  local tail = ' … :messages'
  local short = vim.fn.strcharpart(msg, 0, math.max(room - vim.fn.strdisplaywidth(tail), 10)) .. tail
  local levels = { vim.log.levels.ERROR, vim.log.levels.WARN, vim.log.levels.INFO, vim.log.levels.DEBUG }
  vim.notify(short, levels[result.type] or vim.log.levels.INFO)
end

--- The command line that adapts the model to the repository at `root`: the server's command with
--- `serve` and what follows it replaced by `adapt ROOT` (a `--model DIR` of the server's stays: the
--- model to adapt), and `--minutes N` when given.
function M.adapt_cmd(cmd, root, minutes)
  local out, i = {}, 1
  while i <= #cmd and cmd[i] ~= 'serve' do
    out[#out + 1] = cmd[i]
    i = i + 1
  end
  vim.list_extend(out, { 'adapt', root })
  for j = i + 1, #cmd - 1 do
    if cmd[j] == '--model' then
      vim.list_extend(out, { '--model', cmd[j + 1] })
    end
  end
  if minutes then
    vim.list_extend(out, { '--minutes', tostring(minutes) })
  end
  return out
end

--- :DiffusionLspAdapt [MINUTES]: run `diffusion-lsp adapt` on this buffer's workspace in a terminal
--- split; once it has written the adapted model, the server is told to look again (it answers with
--- the adapted model from then on).
function M.adapt(minutes)
  local client = M.client()
  local root = client and client.root_dir or vim.fn.getcwd()
  local cmd = M.adapt_cmd(M.config.cmd, root, minutes)
  vim.cmd('botright 12split')
  vim.cmd.enew()
  vim.fn.jobstart(cmd, {
    term = true,
    on_exit = function(_, code)
      vim.schedule(function()
        if code ~= 0 then
          return vim.notify('diffusion-lsp adapt failed (exit ' .. code .. '); see its terminal', vim.log.levels.ERROR)
        end
        local settings = vim.tbl_isempty(M.config.settings) and vim.empty_dict() or M.config.settings
        for _, c in ipairs(vim.lsp.get_clients({ name = M.name })) do
          c:notify('workspace/didChangeConfiguration', { settings = settings })
        end
        vim.notify('diffusion-lsp: adapted to ' .. root .. '; completions now come from the adapted model')
      end)
    end,
  })
end

---@param opts? diffusion_lsp.Config
function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(defaults), opts or {})
  local c = M.config
  local status = require('diffusion_lsp.status')
  vim.lsp.config(M.name, {
    cmd = c.cmd,
    filetypes = c.filetypes,
    root_markers = c.root_markers,
    -- an empty Lua table would go out as the JSON array [], which the server rejects
    init_options = vim.tbl_isempty(c.settings) and vim.empty_dict() or c.settings,
    on_attach = function(client, bufnr)
      status.watch(client)
      require('diffusion_lsp.next_edit').attach(client, bufnr, c.next_edit)
    end,
    on_exit = function(_, _, client_id)
      status.forget(client_id)
    end,
    handlers = {
      [CREATE_PROGRESS] = function(err, result, ctx)
        status.loading(ctx.client_id)
        return vim.lsp.handlers[CREATE_PROGRESS](err, result, ctx)
      end,
      ['window/showMessage'] = M.show_message,
    },
  })
  vim.lsp.enable(M.name)
  if c.inline_completion then
    vim.lsp.inline_completion.enable(true)
  end
  require('diffusion_lsp.ghost').setup(M.name)
  keymaps(c.keymaps or {})
  vim.api.nvim_create_autocmd('LspProgress', {
    group = vim.api.nvim_create_augroup('diffusion_lsp.progress', { clear = true }),
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      local value = ev.data.params.value
      if client and client.name == M.name and type(value) == 'table' then
        status.progress(client, value)
      end
    end,
  })
end

return M
