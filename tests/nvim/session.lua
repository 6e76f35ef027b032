-- What every headless driver shares (dofile'd by accept.lua and next_edit.lua, after init.lua): the
-- spec from $DIFFUSION_LSP_SPEC, the result table, `finish` (write the result as JSON and quit, once),
-- `resume` (an error in the driver coroutine ends the session with it), `after` and the watchdog.
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

vim.defer_fn(function()
  M.finish(('watchdog: the session took more than %d ms'):format(M.spec.watchdog_ms))
end, M.spec.watchdog_ms)

return M
