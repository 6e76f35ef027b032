-- An in-process stand-in for `diffusion-lsp serve` (a vim.lsp `cmd` function), for tests that need to
-- choose when an inline completion is answered: it answers initialize and every other request at once
-- (the statusline's stats: a ready worker), and keeps each textDocument/inlineCompletion request in
-- `pending` ({ id, params, answer = function(result) }) until the driver answers it. Replies go out as
-- vim.lsp.rpc's do: the request's "no longer pending" callback (LspRequest "complete") is queued first,
-- its handler after it.
local M = { pending = {} }

local ANSWER = 'textDocument/inlineCompletion'

function M.cmd(_dispatchers)
  local last = 0
  local function reply(callback, notify_reply, id, result)
    vim.schedule(function()
      if notify_reply then
        notify_reply(id)
      end
    end)
    vim.schedule(function()
      callback(nil, result)
    end)
  end
  return {
    request = function(method, params, callback, notify_reply)
      last = last + 1
      local id = last
      if method == 'initialize' then
        reply(callback, notify_reply, id, { capabilities = { inlineCompletionProvider = true } })
      elseif method == ANSWER then
        M.pending[#M.pending + 1] = { id = id, params = params, answer = function(result)
          reply(callback, notify_reply, id, result)
        end }
      else
        reply(callback, notify_reply, id, method == 'diffusionLsp/stats' and { worker = { state = 'ready' } } or vim.NIL)
      end
      return true, id
    end,
    notify = function()
      return true
    end,
    is_closing = function()
      return false
    end,
    terminate = function() end,
  }
end

return M
