-- Argo CD health check for the macvirt.io/v1alpha1 kinds: MacClass, MacPool,
-- MacClaim and MacMachine (config/argocd maps all four to this script).
-- Argo CD sets the global obj to the live object and reads the returned table.
local hs = {status = "Progressing", message = "waiting for the Ready condition"}
local gen = (obj.metadata or {}).generation or 0
local spec = obj.spec or {}
local status = obj.status or {}

local function condition(name)
  for _, c in ipairs(status.conditions or {}) do
    if c.type == name then return c end
  end
end

local function describe(c)
  if c.reason == nil or c.reason == "" then return c.message or "" end
  if c.message == nil or c.message == "" then return c.reason end
  return c.reason .. ": " .. c.message
end

-- Terminal phases a Stalled condition normally reports already.
local terminal = {MacClaim = {Lost = "claim lost its machine"}, MacMachine = {Failed = "machine failed"}}

local stalled = condition("Stalled")
local ready = condition("Ready")
local stale = ready ~= nil and ready.observedGeneration ~= nil and ready.observedGeneration < gen
local failure = (terminal[obj.kind] or {})[status.phase]
-- Argo CD runs health checks on objects being deleted too: one is on its
-- way out (Progressing) unless it waits for a human (Degraded), never
-- Healthy because it was Ready before.
local deleting = (obj.metadata or {}).deletionTimestamp ~= nil

if deleting and stalled ~= nil and stalled.status == "True" then
  hs.status, hs.message = "Degraded", "being deleted, and waits for a human: " .. describe(stalled)
elseif deleting then
  hs.message = "being deleted"
  if ready ~= nil and ready.status ~= "True" then hs.message = hs.message .. ": " .. describe(ready) end
elseif status.observedGeneration == nil or status.observedGeneration < gen then
  hs.message = "waiting for the controller to observe generation " .. gen
elseif stalled ~= nil and stalled.status == "True" then
  hs.status, hs.message = "Degraded", describe(stalled)
elseif obj.kind == "MacPool" and spec.paused == true then
  hs.status, hs.message = "Suspended", "paused: machines are neither created nor deleted"
elseif obj.kind == "MacMachine" and spec.running == false and status.phase == "Stopped" then
  hs.status, hs.message = "Suspended", "stopped; disks kept"
elseif ready ~= nil and ready.status == "True" and not stale then
  hs.status, hs.message = "Healthy", ready.message or ""
elseif failure ~= nil then
  hs.status, hs.message = "Degraded", failure .. (ready ~= nil and (": " .. describe(ready)) or "")
elseif stale then
  hs.message = "Ready condition is from generation " .. ready.observedGeneration .. "; waiting for generation " .. gen
elseif ready ~= nil then
  hs.message = describe(ready)
end
return hs
