--[[
examlops-policy's Slurm job_submit plugin (job_submit/lua): routes GPU jobs to the partition the
policy chooses, and refuses what the policy refuses, from a decision table the layer writes.

It runs inside slurmctld, under its locks, one job at a time: it does no network I/O and asks no
service. It reads two files next to it (in Slurm's configuration directory):

  exa_job_submit.conf        settings, one `key = value` a line (`#` starts a comment):
    table = PATH             the decision table (default: exa_job_submit_table.lua next to this file)
    on_stale = closed|open   a missing, unreadable, corrupt or stale table: refuse GPU jobs
                             (closed, the default) or pass them unchanged, logged (open)
    max_age_seconds = N      a table written longer ago than this is stale (default 300)
    on_unknown = closed|open a GPU job the table has no row for (an account it does not map, a GRES,
                             count, constraint or licence it has no row for): refuse (closed, the
                             default) or pass unchanged, logged (open)
    timing_log = PATH        (benchmarks) append the time each decision took, in microseconds
  A missing conf file means the defaults (fail closed); a conf line it cannot read is logged and
  the setting keeps its default.

  the decision table         written by `exa slurm table` or `exa hardware serve --slurm-table`,
                             atomically (a new file renamed over the old), a Lua chunk that returns
                             the table; its first line says its revision and when it was written
                             (staleness is judged by that line). It is loaded again only when the
                             revision there changes, with no access to any library (an empty
                             environment), under pcall.

What it does with a job (slurm_job_submit):
  * No GPU asked (no gres gpu or shard in tres_per_node / tres_per_job / --gpus-per-task): nothing.
  * Otherwise the job's account (-> project, by the table's account map), GPU type and count per
    node, node count, licences (-> engine, by the table's licence map) and constraints (-> the
    capabilities asked, an AND of features) make the key of a row. A row says:
      route: the partition the policy chooses (set when the job names none) and the partitions it
             admits (a job that names only admitted partitions keeps them); a named partition the
             policy does not admit is refused with the policy's reason for it.
      refuse: the policy's reason; sbatch shows it (slurm.log_user) and the job is not created.
  * The decision and the table's revision are stamped into the job's admin_comment.
Every error inside is caught (pcall): slurmctld never sees a Lua error from here; such an error is
handled as an unusable table (on_stale).

slurm_job_modify applies the same rules to a change of partition, account, GRES, constraints or
licences of a pending job (the job's other fields as they are).
--]]

local M = {}

local CONF_NAME = "exa_job_submit.conf"
local TABLE_NAME = "exa_job_submit_table.lua"
local FORMAT = 1
local NO_VAL = 4294967294 -- Slurm's NO_VAL for a uint32 field not given

-- Slurm's API when loaded by slurmctld; tests load this file with a stand-in `slurm` table.
local slurm = slurm

local function dir_of_this_file()
  local source = debug.getinfo(1, "S").source
  local path = source:match("^@(.*)$") or ""
  return path:match("^(.*)/[^/]*$") or "."
end

M.dir = dir_of_this_file()

-- -- settings ------------------------------------------------------------------------------------

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function defaults()
  return { table = M.dir .. "/" .. TABLE_NAME, on_stale = "closed", max_age_seconds = 300, on_unknown = "closed",
           timing_log = nil, problems = {} }
end

local conf_cache = { text = nil, conf = nil }

-- The settings; parsed again only when the file's text changes (its problems logged then).
local function read_conf()
  local f = io.open(M.dir .. "/" .. CONF_NAME, "r")
  local text = f and f:read("*a") or false
  if f then f:close() end
  if text == conf_cache.text and conf_cache.conf then return conf_cache.conf, false end
  local conf = defaults()
  if not text then
    conf.problems[#conf.problems + 1] = CONF_NAME .. " not found: defaults (on_stale=closed, on_unknown=closed)"
  else
    local n = 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      local body = trim((line:gsub("#.*$", "")))
      if body ~= "" then
        local key, value = body:match("^([%w_]+)%s*=%s*(.-)$")
        if not key then
          conf.problems[#conf.problems + 1] = CONF_NAME .. ":" .. n .. ": expected key = value"
        elseif key == "on_stale" or key == "on_unknown" then
          if value == "open" or value == "closed" then conf[key] = value
          else conf.problems[#conf.problems + 1] = CONF_NAME .. ":" .. n .. ": " .. key .. " must be open or closed (kept closed)" end
        elseif key == "max_age_seconds" then
          local v = tonumber(value)
          if v and v > 0 then conf.max_age_seconds = v
          else conf.problems[#conf.problems + 1] = CONF_NAME .. ":" .. n .. ": max_age_seconds must be a number above 0" end
        elseif key == "table" or key == "timing_log" then
          if value ~= "" then
            conf[key] = value:sub(1, 1) == "/" and value or (M.dir .. "/" .. value)
          end
        else
          conf.problems[#conf.problems + 1] = CONF_NAME .. ":" .. n .. ": unknown setting '" .. key .. "'"
        end
      end
    end
  end
  conf_cache.text, conf_cache.conf = text, conf
  return conf, true
end

-- -- the decision table ------------------------------------------------------------------------------

local cache = { revision = nil, path = nil, table = nil }

-- The table and when it was written (its header line says both), or nil and why it cannot be used.
-- Loaded again only when the revision in its header changes: the service writes the same table
-- again with a new written_at at every step, and that costs a line read, not a reload.
local function load_table(path)
  local f = io.open(path, "r")
  if not f then return nil, "no decision table at " .. path end
  local header = f:read("*l")
  local revision, written_at = (header or ""):match("^%-%- exa%-job%-submit%-table format=%d+ revision=(%S+) written_at=(%d+)$")
  written_at = tonumber(written_at)
  if not revision then
    f:close()
    return nil, "the decision table at " .. path .. " does not start with its header line"
  end
  if revision == cache.revision and path == cache.path then
    f:close()
    return cache.table, written_at
  end
  local rest = f:read("*a")
  f:close()
  local chunk, err = loadstring(header .. "\n" .. (rest or ""), "=" .. path)
  if not chunk then return nil, "the decision table at " .. path .. " does not load: " .. tostring(err) end
  setfenv(chunk, {}) -- no library, no global: data only
  local ok, t = pcall(chunk)
  if not ok then return nil, "the decision table at " .. path .. " does not load: " .. tostring(t) end
  if type(t) ~= "table" or t.format ~= FORMAT or type(t.rows) ~= "table" or type(t.accounts) ~= "table"
     or type(t.licenses) ~= "table" or t.revision ~= revision or type(t.policy_revision) ~= "string" then
    return nil, "the decision table at " .. path .. " is not a table of format " .. FORMAT .. " with the revision its header says"
  end
  chunk, rest = nil, nil
  -- The garbage of the load (its text, the chunk) collected now, once per revision, not by
  -- the incremental collector in the middle of a later job's decision.
  collectgarbage("collect")
  cache.revision, cache.path, cache.table = revision, path, t
  return t, written_at
end

-- -- what the job asks ---------------------------------------------------------------------------------

local function unset(v)
  return v == nil or v == "" or v == NO_VAL
end

-- The GPU the job asks per node: type, count; or nil (no GPU); or false and why the table cannot say.
local function gpu_ask(job)
  for _, field in ipairs({ "tres_per_task", "tres_per_socket" }) do
    local v = job[field]
    if not unset(v) and (v:find("gpu", 1, true) or v:find("shard", 1, true)) then
      return false, "GPUs asked per " .. field:sub(10) .. " (" .. v .. ")"
    end
  end
  local found, spec
  local sources = { { "tres_per_node", job.tres_per_node }, { "tres_per_job", job.tres_per_job } }
  for _, src in ipairs(sources) do
    local v = src[2]
    if not unset(v) then
      for entry in v:gmatch("[^,]+") do
        local e = entry:gsub("^gres[:/]", "")
        local name, rest = e:match("^([^:]+):?(.*)$")
        if name == "shard" then
          return false, "a shard of a GPU (" .. entry .. ")"
        elseif name == "gpu" then
          if found then return false, "more than one GPU request (" .. v .. ")" end
          local gtype, count = rest:match("^([^:]+):(%d+)$")
          if not gtype then
            if rest == "" or rest:match("^%d+$") then
              return false, "a GPU without its type (" .. entry .. "): ask --gres=gpu:TYPE:N"
            end
            if not rest:match("^[%w%._%-]+$") then return false, "a GPU request it cannot read (" .. entry .. ")" end
            gtype, count = rest, "1"
          end
          found = { type = gtype:lower(), count = tonumber(count), per = src[1] }
          spec = entry
        end
      end
    end
  end
  if not found then return nil end
  if found.per == "tres_per_job" then
    local nodes = job.min_nodes
    if not unset(nodes) and nodes > 1 then
      return false, "GPUs per job (" .. spec .. ") over " .. nodes .. " nodes: ask them per node (--gres)"
    end
  end
  return found
end

-- The capabilities a constraint asks (features joined by &), sorted; or false when it is more.
local function capabilities(features)
  if unset(features) then return "" end
  if features:find("[|%[%]%*%(%)!,]") then return false end
  local seen, list = {}, {}
  for f in features:gmatch("[^&]+") do
    local tag = trim(f):lower()
    if tag == "" then return false end
    if not seen[tag] then seen[tag] = true; list[#list + 1] = tag end
  end
  table.sort(list)
  return table.concat(list, ",")
end

-- The engine the job's licences name (the table's licence map), "generic" when none; false when two.
local function engine_of(licenses, map)
  local engine = nil
  if not unset(licenses) then
    for entry in licenses:gmatch("[^,]+") do
      local name = trim(entry:match("^([^:@]+)") or entry)
      local e = map[name]
      if e then
        if engine and engine ~= e then return false end
        engine = e
      end
    end
  end
  return engine or "generic"
end

local function split_partitions(p)
  local list = {}
  if not unset(p) then
    for name in p:gmatch("[^,]+") do list[#list + 1] = trim(name) end
  end
  return list
end

-- -- the decision --------------------------------------------------------------------------------------

-- What to do with a job: {action = "pass"|"route"|"refuse", partition, message, stamp, log}.
local function decide(job, conf)
  local ask, why = gpu_ask(job)
  if ask == nil then return { action = "pass", quiet = true } end
  local t, written_at = load_table(conf.table)
  local problem
  if not t then
    problem = written_at
  elseif os.time() - written_at > conf.max_age_seconds then
    problem = string.format("the decision table at %s is stale: written %ds ago, max_age_seconds = %d",
      conf.table, os.time() - written_at, conf.max_age_seconds)
    t = nil
  end
  if not t then
    if conf.on_stale == "open" then
      return { action = "pass", stamp = "exa: passed unchanged (on_stale=open): " .. problem, log = problem }
    end
    return { action = "refuse", message = "exa: GPU jobs are refused while the placement policy's decision table cannot be used ("
      .. problem .. "; on_stale=closed). Ask the site's administrators.", log = problem }
  end
  local rev = "policy " .. t.policy_revision:sub(1, 19) .. ", table " .. t.revision:sub(1, 12)
  local function unknown(text)
    local msg = "exa: the placement policy's decision table cannot decide this job: " .. text
    if conf.on_unknown == "open" then
      return { action = "pass", stamp = "exa: passed unchanged (on_unknown=open; " .. rev .. "): " .. text, log = msg }
    end
    return { action = "refuse", message = msg .. " (on_unknown=closed; " .. rev .. ")", log = msg }
  end
  if ask == false then return unknown(why) end
  local account = unset(job.account) and "" or job.account
  local profile = t.accounts[account] or t.default_profile
  if not profile then
    return unknown("account '" .. account .. "' is not mapped to a project (the reviewed accounts file)")
  end
  local caps = capabilities(job.features)
  if caps == false then return unknown("constraint '" .. job.features .. "' is more than features joined by &") end
  local engine = engine_of(job.licenses, t.licenses)
  if engine == false then return unknown("licences '" .. job.licenses .. "' name more than one engine") end
  local nodes = (unset(job.min_nodes) or job.min_nodes == 0) and 1 or job.min_nodes
  local key = profile .. "|" .. ask.type .. "|" .. ask.count .. "|" .. nodes .. "|" .. engine .. "|" .. caps
  local row = t.rows[key]
  if not row then
    return unknown(string.format("no row for %s (project/residency/data region), gpu:%s:%d on %d node(s), engine %s, capabilities [%s]",
      profile, ask.type, ask.count, nodes, engine, caps))
  end
  local stamp = "exa: " .. key .. " -> "
  if row.refuse then
    return { action = "refuse", message = "exa: refused by the placement policy (" .. rev .. "): " .. row.refuse,
             log = "refused " .. key .. ": " .. row.refuse }
  end
  local named = split_partitions(job.partition)
  if #named == 0 then
    return { action = "route", partition = row.partition, stamp = stamp .. "partition " .. row.partition .. " (" .. rev .. ")" }
  end
  for _, p in ipairs(named) do
    if not row.admits[p] then
      local reason = (row.no and row.no[p]) or ("the partitions the policy admits for this job are " .. row.admitted)
      return { action = "refuse", message = "exa: refused by the placement policy (" .. rev .. "): partition " .. p
        .. " is not admitted for this job: " .. reason, log = "refused " .. key .. " on partition " .. p }
    end
  end
  return { action = "keep", stamp = stamp .. "kept partition " .. job.partition .. " (admitted; " .. rev .. ")" }
end

local function apply(job, d)
  if d.log then slurm.log_info("exa job_submit: %s", d.log) end
  if d.action == "refuse" then
    slurm.log_user("%s", d.message)
    return slurm.ERROR
  end
  if d.action == "route" then job.partition = d.partition end
  if d.stamp then
    local before = job.admin_comment
    job.admin_comment = unset(before) and d.stamp or (before .. "; " .. d.stamp)
  end
  return slurm.SUCCESS
end

local function timed(conf, started)
  if conf and conf.timing_log then
    local f = io.open(conf.timing_log, "a")
    if f then
      f:write(string.format("%.1f\n", (os.clock() - started) * 1e6))
      f:close()
    end
  end
end

local function run(job)
  local started = os.clock()
  local ok, conf, fresh = pcall(read_conf)
  if not ok then
    local err = conf
    conf, fresh = defaults(), true
    conf.problems = { "reading " .. CONF_NAME .. " failed: " .. tostring(err) }
  end
  if fresh then
    for _, p in ipairs(conf.problems) do slurm.log_error("exa job_submit: %s", p) end
  end
  local done, d = pcall(decide, job, conf)
  if not done then
    local problem = "the decision failed: " .. tostring(d)
    slurm.log_error("exa job_submit: %s", problem)
    if conf.on_stale == "open" then
      d = { action = "pass", stamp = "exa: passed unchanged (on_stale=open): " .. problem }
    else
      d = { action = "refuse", message = "exa: GPU jobs are refused while the placement policy's decision table cannot be used ("
        .. problem .. "; on_stale=closed)" }
    end
  end
  local applied, rc = pcall(apply, job, d)
  timed(conf, started)
  if not applied then
    slurm.log_error("exa job_submit: applying the decision failed: %s", tostring(rc))
    return conf.on_stale == "open" and slurm.SUCCESS or slurm.ERROR
  end
  return rc
end

-- A view of a pending job being modified: the changed fields, else the job's own.
local function merged(job_desc, job_rec)
  return setmetatable({}, {
    __index = function(_, k)
      local v = job_desc[k]
      if unset(v) then v = job_rec[k] end
      return v
    end,
    __newindex = function(_, k, v) job_desc[k] = v end,
  })
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  return run(job_desc)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local touched = false
  for _, k in ipairs({ "partition", "account", "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "features", "licenses", "min_nodes" }) do
    local ok, v = pcall(function() return job_desc[k] end)
    if ok and not unset(v) then touched = true end
  end
  if not touched then return slurm.SUCCESS end
  -- The job as it would be: its partition (new or kept) must be one the policy admits for it.
  return run(merged(job_desc, job_rec))
end

-- For tests run by a plain Lua interpreter: the functions the plugin is made of.
M.gpu_ask, M.capabilities, M.engine_of, M.read_conf, M.load_table, M.decide = gpu_ask, capabilities, engine_of, read_conf, load_table, decide
exa_job_submit = M

return slurm and slurm.SUCCESS or 0
