-- What every headless driver shares (dofile'd by accept.lua and next_edit.lua, after init.lua): the
-- spec from $DIFFUSION_LSP_SPEC, the result table, `finish` (write the result as JSON and quit, once),
-- `resume` (an error in the driver coroutine ends the session with it), `after`, `open` and the watchdog.
local M = {}
M.spec = vim.json.decode(table.concat(vim.fn.readfile(assert(vim.env.DIFFUSION_LSP_SPEC)), '\n'))
M.result = {}
local done = false

function M.finish(err)
  if done then
    return
  end
  done = true
  M.result.error = err
  vim.fn.writefile({ vim.json.encode(M.result) }, M.spec.result)
  vim.cmd('qall!')
end

--- Resume the driver coroutine; an error in it ends the session with that error.
function M.resume(co)
  local ok, err = coroutine.resume(co)
  if not ok then
    M.finish('driver error: ' .. tostring(err))
  end
end

--- Run `start` and suspend the calling coroutine until `event` fires (mode switches happen only once
--- the current callback has returned to Neovim's main loop).
function M.after(event, start)
  local me = coroutine.running()
  vim.api.nvim_create_autocmd(event, {
    once = true,
    callback = function()
      vim.schedule(function()
        M.resume(me)
      end)
    end,
  })
  start()
  coroutine.yield()
end

--- Open spec.file and wait for the diffusion-lsp client (init.lua's) to start within `start_ms` and
--- its model to load (its $/progress ends) within spec.ready_ms -> the client, or nil after finish().
function M.open(start_ms)
  local loaded = false
  vim.api.nvim_create_autocmd('LspProgress', {
    callback = function(ev)
      local value = ev.data.params.value
      loaded = loaded or (type(value) == 'table' and value.kind == 'end')
    end,
  })
  local function running()
    return #vim.lsp.get_clients({ name = 'diffusion-lsp' }) > 0
  end
  vim.cmd.edit(vim.fn.fnameescape(M.spec.file))
  if not vim.wait(start_ms, running, 20) then -- vim.lsp.enable starts it on a later loop turn
    return M.finish('diffusion-lsp did not start for ' .. M.spec.file .. ' (see tests/nvim/init.lua)')
  end
  if not vim.wait(M.spec.ready_ms, function()
    return loaded or not running()
  end, 20) or not loaded then
    return M.finish(('the model did not load ($/progress end) within %d ms, or the server exited'):format(
      M.spec.ready_ms))
  end
  local client = vim.lsp.get_clients({ bufnr = 0, name = 'diffusion-lsp' })[1]
  if not client then
    return M.finish('diffusion-lsp is not attached to ' .. M.spec.file)
  end
  return client
end

vim.defer_fn(function()
  M.finish(('watchdog: the session took more than %d ms'):format(M.spec.watchdog_ms))
end, M.spec.watchdog_ms)

return M
