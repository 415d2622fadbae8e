-- Argo CD health of a Barge InferencePool (barge.dev/v1alpha1), read from the kstatus conditions Barge writes.
-- Runs without Lua's string and math libraries (argocd-cm scripts do not get them unless useOpenLibs is set).
--   generation not yet observed -> Progressing   Stalled=True (ScalingConflict, ProgressDeadlineExceeded,
--   Ready=True                  -> Healthy       SecretNotFound, InvalidSpec) -> Degraded
--   Ready=True (ScaledToZero)   -> Healthy       Reconciling=True (starting, replicas unavailable) -> Progressing
-- A pool scaled to zero is Healthy: zero replicas is its steady state until work arrives, and a Progressing
-- pool in sync wave 0 would hold back the very jobs (wave 1) that give it work.
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
  if ready.reason == "ScaledToZero" then
    hs.message = "Scaled to zero: waiting for work"
  else
    hs.message = ready.message or "Ready"
    if status.endpoint ~= nil and status.endpoint ~= "" then
      hs.message = hs.message .. "; endpoint " .. status.endpoint
    end
  end
  return hs
end

local reconciling = condition(status, "Reconciling")
hs.status = "Progressing"
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = (reconciling.reason or "Reconciling") .. ": " .. (reconciling.message or "")
else
  hs.message = "Waiting for Barge's status"
end
return hs
