-- Argo CD health of a Barge LLMBatchJob (barge.dev/v1alpha1), read from the kstatus conditions Barge writes.
-- Runs without Lua's string and math libraries (argocd-cm scripts do not get them unless useOpenLibs is
-- set), so numbers are formatted by hand with `..`, `%` and `/` only (Lua 5.1: there is no `//`).
--   generation not yet observed -> Progressing   Stalled=True (Failed, DeadlineExceeded, BudgetExceeded,
--   Ready=True (Succeeded)      -> Healthy       InvalidSpec) -> Degraded, "<reason>: <message>"
--   Ready=True (Suspended)      -> Healthy       Reconciling=True (running, waiting) -> Progressing
-- A suspended job is Healthy, not Suspended: Argo CD's Suspended holds its sync wave (and every later wave)
-- until the job is resumed; the message says it is suspended.
local hs = {}

local function thousands(n)
  if n == nil then
    return "0"
  end
  if n < 1000 then
    return tostring(n)
  end
  local rest = n % 1000
  local pad = ""
  if rest < 10 then
    pad = "00"
  elseif rest < 100 then
    pad = "0"
  end
  return thousands((n - rest) / 1000) .. "," .. pad .. tostring(rest)
end

local function condition(status, kind)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function progress(status)
  local counts = status.counts or {}
  local done = (counts.succeeded or 0) + (counts.refused or 0)
  local inflight = 0
  if status.batches ~= nil then
    for _, b in ipairs(status.batches) do
      if b.endedAt == nil then
        inflight = inflight + 1
      end
    end
  end
  local text = thousands(done) .. "/" .. thousands(counts.total or 0) .. " done, "
  if inflight == 1 then
    text = text .. "1 batch in flight"
  else
    text = text .. thousands(inflight) .. " batches in flight"
  end
  if (counts.failed or 0) + (counts.invalid or 0) > 0 then
    text = text .. ", " .. thousands((counts.failed or 0) + (counts.invalid or 0)) .. " failed or invalid"
  end
  return text
end

local status = obj.status
local generation = obj.metadata.generation or 0
if status == nil or status.observedGeneration == nil or status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for Barge to observe generation " .. tostring(generation)
  return hs
end

local stalled = condition(status, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = (stalled.reason or "Stalled") .. ": " .. (stalled.message or "")
  return hs
end

local ready = condition(status, "Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  if ready.reason == "Suspended" then
    hs.message = "Suspended (spec.suspend): " .. progress(status)
  else
    hs.message = (ready.reason or "Ready") .. ": " .. progress(status)
  end
  return hs
end

local reconciling = condition(status, "Reconciling")
hs.status = "Progressing"
if reconciling ~= nil and reconciling.status == "True" then
  local admitted = condition(status, "Admitted")
  if admitted ~= nil and admitted.status == "False" then
    hs.message = (reconciling.reason or "Pending") .. ": " .. (admitted.message or "")
  else
    hs.message = (reconciling.reason or "Running") .. ": " .. progress(status)
  end
else
  hs.message = "Waiting for Barge's status"
end
return hs
