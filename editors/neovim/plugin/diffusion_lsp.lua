-- Commands; the plugin itself starts with require('diffusion_lsp').setup({...}).
if vim.g.loaded_diffusion_lsp then
  return
end
vim.g.loaded_diffusion_lsp = true

vim.api.nvim_create_user_command('DiffusionLspNextEdit', function()
  require('diffusion_lsp.next_edit').ask()
end, { desc = 'diffusion-lsp: ask for the next edit at the cursor (says so when there is none)' })
vim.api.nvim_create_user_command('DiffusionLspAcceptEdit', function()
  require('diffusion_lsp.next_edit').accept()
end, { desc = 'diffusion-lsp: jump to / apply the shown next edit' })
vim.api.nvim_create_user_command('DiffusionLspStats', function()
  local client = require('diffusion_lsp').client()
  if not client then
    return vim.notify('diffusion-lsp is not attached to this buffer', vim.log.levels.WARN)
  end
  client:request('diffusionLsp/stats', {}, function(err, result)
    vim.notify(err and ('diffusion-lsp: ' .. err.message) or vim.inspect(result.counts))
  end)
end, { desc = 'diffusion-lsp: the server statistics' })
vim.api.nvim_create_user_command('DiffusionLspAdapt', function(args)
  require('diffusion_lsp').adapt(tonumber(args.args))
end, { nargs = '?', desc = 'diffusion-lsp: adapt the model to this repository (optional: minutes, default 10)' })
vim.api.nvim_create_user_command('DiffusionEdit', function(args)
  require('diffusion_lsp.instruct').edit(args.line1, args.line2, args.args)
end, { range = true, nargs = '*', desc = 'diffusion-lsp: rewrite the lines as the instruction says (asked for when not given); a: accept, r: reject' })
