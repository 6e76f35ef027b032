-- Neovim 0.12 config for tests/test_neovim_plugin.py: the plugin from editors/neovim and its setup(),
-- nothing else.
--   DIFFUSION_LSP_PLUGIN_DIR    editors/neovim
--   DIFFUSION_LSP_CMD           JSON list: the server command
--   DIFFUSION_LSP_INIT_OPTIONS  JSON object: the server's settings
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
vim.opt.runtimepath:prepend((assert(vim.env.DIFFUSION_LSP_PLUGIN_DIR, 'DIFFUSION_LSP_PLUGIN_DIR is not set')))
vim.lsp.log.set_level(vim.log.levels.WARN)
require('diffusion_lsp').setup({
  cmd = vim.json.decode((assert(vim.env.DIFFUSION_LSP_CMD, 'DIFFUSION_LSP_CMD is not set'))),
  filetypes = { 'python' },
  settings = vim.json.decode(vim.env.DIFFUSION_LSP_INIT_OPTIONS or '{}'),
  next_edit = { auto = false }, -- the driver asks itself, so that each answer is awaited
})
