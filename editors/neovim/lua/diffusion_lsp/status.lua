-- The model's state for the statusline: the worker state the server reports in diffusionLsp/stats
-- (stopped | loading | ready | failed). "loading" from the server's window/workDoneProgress/create
-- (its first word of a model load) to the answer asked for when the $/progress report ends;
-- "starting" until then, or until the first answer. Asked again every POLL_MS, for what no event
-- tells. Each change redraws the statusline: a statusline expression is evaluated only on a redraw,
-- and nothing else redraws when the model has loaded.
local M = {}

local STATS = 'diffusionLsp/stats'
local POLL_MS = 3000 -- as the VS Code extension: a remote API, completions off, a worker gone for good
local worker = {} -- client id -> the worker state of the last stats answer
local loading = {} -- client id -> true while the model loads (and its end is being asked about)
local timers = {} -- client id -> uv timer

local function redraw()
  vim.cmd('redrawstatus!')
end

--- starting | loading | ready | stopped | failed
function M.state(client_id)
  return loading[client_id] and 'loading' or worker[client_id] or 'starting'
end

--- Ask the server for its worker state; the statusline shows it once the answer is in. `loaded`:
--- asked at the end of a $/progress report, whose "loading" the answer ends.
function M.refresh(client, loaded)
  client:request(STATS, {}, function(err, result)
    local state = not err and type(result) == 'table' and type(result.worker) == 'table' and result.worker.state
    local before = M.state(client.id)
    if type(state) == 'string' then
      worker[client.id] = state
    end
    if loaded then
      loading[client.id] = nil
    end
    if M.state(client.id) ~= before then
      redraw()
    end
  end)
end

--- The model starts loading. Said from the progress token's request on (before the report begins),
--- since the server may answer stats meanwhile with its worker still "stopped".
function M.loading(client_id)
  if not loading[client_id] then
    loading[client_id] = true
    redraw()
  end
end

--- On LspProgress: a report that begins means the model is loading; one that ends, ask what came of it.
function M.progress(client, value)
  if value.kind == 'begin' then
    M.loading(client.id)
  elseif value.kind == 'end' then
    loading[client.id] = true -- until the answer: not the state from before the load
    M.refresh(client, true)
  end
end

--- Poll the client's worker state (once per client, from its first attached buffer on).
function M.watch(client)
  if timers[client.id] then
    return
  end
  local timer = assert(vim.uv.new_timer())
  timers[client.id] = timer
  timer:start(POLL_MS, POLL_MS, vim.schedule_wrap(function()
    if not loading[client.id] and not client:is_stopped() then
      M.refresh(client)
    end
  end))
end

--- The client is gone: nothing to show or ask for it.
function M.forget(client_id)
  worker[client_id], loading[client_id] = nil, nil
  if timers[client_id] then
    timers[client_id]:close()
    timers[client_id] = nil
  end
  vim.schedule(redraw) -- on_exit runs in a fast event
end

return M
