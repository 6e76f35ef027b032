-- :checkhealth diffusion_lsp: the server command, the Neovim version (and whether the plugin can see the
-- shown ghost text), and for each running client the server's version, whether the model is loaded
-- and whether its worker process is alive.
local M = {}

function M.check()
  local h = vim.health
  local plugin = require('diffusion_lsp')
  h.start('diffusion_lsp')
  if vim.fn.has('nvim-0.12') == 1 then
    h.ok('Neovim ' .. tostring(vim.version()) .. ' (vim.lsp.inline_completion)')
    if require('diffusion_lsp.ghost').supported() then
      h.ok('shown ghost text is reported to the server (textDocument/didShowCompletion)')
    else
      h.warn('this Neovim does not let the plugin see the shown ghost text: none is counted as shown, '
        .. 'and an answer that comes after leaving insert mode is drawn anyway')
    end
  else
    h.error('Neovim 0.12 or newer is needed (vim.lsp.inline_completion)')
  end
  local exe = plugin.config.cmd[1]
  if vim.fn.executable(exe) == 1 then
    h.ok('server command: ' .. vim.fn.exepath(exe))
  else
    h.error(('server command not found: %s'):format(exe), {
      'install the server: pip install -e . in a diffusion-lsp checkout (see its README)',
      "or point setup({ cmd = { '/path/to/venv/bin/diffusion-lsp', 'serve' } }) at it",
    })
  end
  local clients = vim.lsp.get_clients({ name = plugin.name })
  if #clients == 0 then
    h.info('no diffusion_lsp client is running: open a file of one of the configured filetypes ('
      .. table.concat(plugin.config.filetypes, ', ') .. ')')
  end
  for _, client in ipairs(clients) do
    local info = client.server_info or {}
    h.ok(('server %s %s (client %d)'):format(info.name or '?', info.version or '?', client.id))
    local reply = client:request_sync('diffusionLsp/stats', {}, 5000)
    local worker = reply and not reply.err and reply.result and reply.result.worker
    if not worker then
      h.warn('the server did not answer diffusionLsp/stats')
    elseif worker.state == 'ready' then
      h.ok('model loaded (worker state ready)')
    elseif worker.state == 'loading' or worker.state == 'starting' then
      h.warn('the model is still loading (worker state ' .. worker.state .. ')')
    else
      h.error(('the model is not available (worker state %s): %s'):format(worker.state, worker.error or 'no error given'))
    end
    if worker and worker.pid then
      if vim.uv.kill(worker.pid, 0) == 0 then
        h.ok(('worker process %d is alive'):format(worker.pid))
      else
        h.error(('worker process %d is gone'):format(worker.pid))
      end
    end
  end
end

return M
