-- Minimal Neovim 0.12 config for the editor test (tests/test_neovim.py): diffusion-lsp is the only
-- language server, and Neovim's native inline completion shows its suggestions as ghost text.
--   DIFFUSION_LSP_CMD           JSON list: the server command (`... serve --model DIR ...`)
--   DIFFUSION_LSP_INIT_OPTIONS  JSON object: initializationOptions (the server's settings)
local cmd = vim.json.decode((assert(vim.env.DIFFUSION_LSP_CMD, 'DIFFUSION_LSP_CMD is not set')))
local init_options = vim.json.decode(vim.env.DIFFUSION_LSP_INIT_OPTIONS or '{}')

vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
vim.lsp.log.set_level(vim.log.levels.WARN)

vim.lsp.config('diffusion-lsp', {
  cmd = cmd,
  filetypes = { 'python' },
  init_options = init_options,
  root_dir = function(_, on_dir)
    on_dir(vim.fn.getcwd())
  end,
})
vim.lsp.enable('diffusion-lsp')
vim.lsp.inline_completion.enable(true)
