-- Neovim 0.12 config for tests/test_neovim_plugin.py: the plugin from editors/neovim and its setup(),
-- nothing else.
--   DIFFUSION_LSP_PLUGIN_DIR    editors/neovim
--   DIFFUSION_LSP_CMD           JSON list: the server command
--   DIFFUSION_LSP_INIT_OPTIONS  JSON object: the server's settings, given to setup()
--   DIFFUSION_LSP_SETTINGS_VIA  "workspace": give them to vim.lsp.config's `settings` instead (sent
--                               with workspace/didChangeConfiguration), leaving setup()'s at its default
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
vim.opt.runtimepath:prepend((assert(vim.env.DIFFUSION_LSP_PLUGIN_DIR, 'DIFFUSION_LSP_PLUGIN_DIR is not set')))
vim.lsp.log.set_level(vim.log.levels.WARN)
local settings = vim.json.decode(vim.env.DIFFUSION_LSP_INIT_OPTIONS or '{}')
local via_workspace = vim.env.DIFFUSION_LSP_SETTINGS_VIA == 'workspace'
require('diffusion_lsp').setup({
  cmd = vim.json.decode((assert(vim.env.DIFFUSION_LSP_CMD, 'DIFFUSION_LSP_CMD is not set'))),
  filetypes = { 'python' },
  settings = not via_workspace and settings or nil,
  next_edit = { auto = false }, -- the driver asks itself, so that each answer is awaited
})
if via_workspace then
  vim.lsp.config(require('diffusion_lsp').name, { settings = settings })
end
