-- Argo CD health of a Barge LLMBatchSchedule (barge.dev/v1alpha1), read from the kstatus conditions Barge writes
-- and the newest run it reports. Runs without Lua's string and math libraries (argocd-cm scripts do not get them).
--   generation not yet observed      -> Progressing   Stalled=True (InvalidSchedule, ...) -> Degraded
--   Ready=True, newest run Failed    -> Degraded      "<reason>: <message>"
--   Ready=True (Scheduled, Suspended) -> Healthy     anything else -> Progressing
-- A suspended schedule is Healthy, not Suspended (Argo CD's Suspended holds later sync waves); the message says so.
local hs = {}

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

local function next_run(status)
  if status.nextScheduleTime == nil then
    return ""
  end
  return "; next run at " .. status.nextScheduleTime
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
  local last = status.lastRun
  if last ~= nil and last.phase == "Failed" then
    hs.status = "Degraded"
    hs.message = "LastRunFailed: LLMBatchJob " .. (last.name or "") .. " Failed" .. next_run(status)
    return hs
  end
  hs.status = "Healthy"
  if ready.reason == "Suspended" then
    hs.message = "Suspended (spec.suspend): " .. (status.message or "")
  else
    hs.message = (ready.reason or "Scheduled") .. ": " .. (status.message or "") .. next_run(status)
  end
  return hs
end

hs.status = "Progressing"
hs.message = "Waiting for Barge's status"
return hs
