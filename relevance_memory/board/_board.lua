-- relevance-memory board: apply one batch of operations atomically (SPEC §5, §10).
--
-- A line-by-line mirror of relevance_memory/_pheromone_math.py (settle, deposit,
-- reinforce, capped_deposit) and relevance_memory/board/_apply.py (step); the board
-- contract tests prove both give bit-identical snapshots. Floats are stored as %.17g
-- strings (cjson keeps only 14 digits of a number), so every value round-trips exactly.
--
-- KEYS[1]            the batch marker (a retried batch id is applied once)
-- KEYS[3j-1 .. 3j+1] scope j's cells hash, meta hash (field "tick"), edges hash
-- ARGV[1]            config JSON: rates, initial, deposits, s_max, reinforce, edge,
--                    protect, exempt, events_kept, lease, batch_ttl
-- ARGV[2]            batch JSON: {scopes = [{cap}], ops = [...]}
-- Returns the JSON {dup, out = [outcome...], amt = ["%.17g"...]}.
--
-- Nothing is written until every operation has been computed: a runtime error leaves
-- the board as it was (Redis does not roll a script back).

if redis.call('EXISTS', KEYS[1]) == 1 then
  return cjson.encode({dup = true})
end

local cfg = cjson.decode(ARGV[1])
local batch = cjson.decode(ARGV[2])
local RATES, INIT, DEP = {}, {}, {}
for k, v in pairs(cfg.rates) do RATES[k] = tonumber(v) end
for k, v in pairs(cfg.initial) do INIT[k] = tonumber(v) end
for k, v in pairs(cfg.deposits) do DEP[tonumber(k)] = tonumber(v) end
local SMAX, RF, EDGE = tonumber(cfg.s_max), tonumber(cfg.reinforce), tonumber(cfg.edge)
local PROTECT, EXEMPT, KEPT, LEASE = cfg.protect, cfg.exempt, cfg.events_kept, cfg.lease

local function fmt(x) return string.format('%.17g', x) end

-- ------------------------------------------------------------------ cells
local function decode(raw)
  if not raw then return nil, false end
  local ok, d = pcall(cjson.decode, raw)
  if not ok or type(d) ~= 'table' then return nil, true end
  local c = {}
  c.kind = d.kind
  c.born, c.at = tonumber(d.born), tonumber(d.at)
  c.s, c.earned, c.ldep = tonumber(d.s), tonumber(d.earned or '0'), tonumber(d.ldep or '0')
  c.created, c.touched = tonumber(d.created or '0'), tonumber(d.touched or '0')
  if type(c.kind) ~= 'string' or not RATES[c.kind] or not c.born or not c.at or not c.s
     or not c.earned or not c.ldep or not c.created or not c.touched or type(d.producer) ~= 'string' then
    return nil, true
  end
  if c.s ~= c.s or c.s == math.huge or c.s == -math.huge then return nil, true end
  c.score, c.prev, c.goal = d.score, d.prev, d.goal
  if d.lkey then c.lkey = {d.lkey[1], d.lkey[2]} end
  if d.skey then c.skey = {d.skey[1], d.skey[2]} end
  c.subs = {}
  if type(d.subs) == 'table' then for _, s in ipairs(d.subs) do c.subs[#c.subs + 1] = s end end
  c.producer, c.status = d.producer, d.status or 'active'
  c.sup_by, c.status_by, c.first = d.sup_by, d.status_by, d.first
  c.contrib = {}
  if type(d.contrib) == 'table' then for a, v in pairs(d.contrib) do c.contrib[a] = tonumber(v) end end
  c.users = {}
  if type(d.users) == 'table' then for a, t in pairs(d.users) do c.users[a] = tonumber(t) end end
  c.n_dep, c.n_rf = tonumber(d.n_dep or 0), tonumber(d.n_rf or 0)
  c.events = {}
  if type(d.events) == 'table' then
    for _, e in ipairs(d.events) do c.events[#c.events + 1] = {e[1], e[2], tonumber(e[3]), tonumber(e[4]), tonumber(e[5])} end
  end
  return c, false
end

local function encode(c)
  local contrib = {}
  for a, v in pairs(c.contrib) do contrib[a] = fmt(v) end
  local events = {}
  for i, e in ipairs(c.events) do events[i] = {e[1], e[2], e[3], fmt(e[4]), fmt(e[5])} end
  return cjson.encode({
    kind = c.kind, born = c.born, s = fmt(c.s), at = c.at, earned = fmt(c.earned), ldep = fmt(c.ldep),
    subs = c.subs, producer = c.producer, created = fmt(c.created), touched = fmt(c.touched),
    status = c.status, contrib = contrib, n_dep = c.n_dep, n_rf = c.n_rf, users = c.users, events = events,
    score = c.score, goal = c.goal, lkey = c.lkey, skey = c.skey, prev = c.prev,
    sup_by = c.sup_by, status_by = c.status_by, first = c.first,
  })
end

local function event(c, agent, op, tick, amount, at)
  if KEPT == 0 then return end
  c.events[#c.events + 1] = {agent, op, tick, amount, at}
  while #c.events > KEPT do table.remove(c.events, 1) end
end

-- ------------------------------------------------------------------ SPEC §5 (mirrors _pheromone_math)
local function evaporating_ticks(c, tick)
  if c.at >= tick then return 0 end
  if c.score ~= nil and c.score >= EXEMPT then return 0 end
  return math.max(0, tick - math.max(c.at, c.born + PROTECT))
end

local function settle(c, tick)
  if c.at >= tick then return end
  local n = evaporating_ticks(c, tick)
  if n > 0 then
    local f = (1.0 - RATES[c.kind]) ^ n
    c.s, c.earned, c.ldep = c.s * f, c.earned * f, c.ldep * f
  end
  c.at = tick
end

local function capped(strength, delta)
  return delta * math.max(0.0, 1.0 - strength / SMAX)
end

local function limit_of(c, cap, agent)
  if cap == nil then return nil end
  return math.max(0.0, cap - (c.contrib[agent] or 0.0))
end

local function keq(a, b) return a ~= nil and a[1] == b[1] and a[2] == b[2] end

local function holders(c, tick, other_than)
  local out = {}
  for a, t in pairs(c.users) do
    if a ~= other_than and tick - t <= LEASE then out[#out + 1] = a end
  end
  table.sort(out)
  return out
end

-- ------------------------------------------------------------------ the batch
local scopes = {}
for j, sc in ipairs(batch.scopes) do
  local base = 3 * j - 1
  scopes[j] = {cells = KEYS[base], meta = KEYS[base + 1], edges = KEYS[base + 2],
               cap = sc.cap and tonumber(sc.cap) or nil,
               tick = tonumber(redis.call('HGET', KEYS[base + 1], 'tick') or '0'),
               cache = {}, dirty = {}, edge_cache = {}, ticked = false}
end

local function load(sc, id)
  local got = sc.cache[id]
  if got == nil then
    local c, corrupt = decode(redis.call('HGET', sc.cells, id))
    got = {c = c, corrupt = corrupt}
    sc.cache[id] = got
  end
  return got
end

local out, amt = {}, {}
for i, op in ipairs(batch.ops) do
  local sc = scopes[op.scope]
  local tick = sc.tick
  local outcome, amount = nil, 0.0
  if op.t == 'advance' then
    if op.to then sc.tick = math.max(tick, op.to) else sc.tick = tick + op.ticks end
    sc.ticked = true
    outcome = 'advanced'
  elseif op.t == 'repair' then
    local got = load(sc, op.id)
    if got.c ~= nil then
      outcome = 'readable'
    else
      local c = decode(op.cell)
      sc.cache[op.id] = {c = c, corrupt = false}
      sc.dirty[op.id] = true
      outcome = 'repaired'
    end
  else
    local got = load(sc, op.id)
    local c = got.c
    local at = tonumber(op.at)
    if got.corrupt then
      outcome = 'corrupt'
    elseif op.t == 'add' then
      if c ~= nil then
        outcome = 'exists'
      else
        local s = op.strength and tonumber(op.strength) or INIT[op.kind]
        c = {kind = op.kind, born = tick, s = s, at = tick, earned = 0.0, ldep = 0.0, subs = {},
             producer = op.agent, created = at, touched = at, status = 'active', contrib = {},
             users = {}, n_dep = 0, n_rf = 0, events = {}}
        event(c, op.agent, 'add', tick, s, at)
        got.c = c
        sc.dirty[op.id] = true
        outcome = 'added'
      end
    elseif c == nil then
      outcome = 'missing'
    elseif op.t == 'deposit' then
      local limit = limit_of(c, sc.cap, op.agent)
      settle(c, tick)
      local strength, earned, ldep = c.s, c.earned, c.ldep
      local lkey, skey = c.lkey, c.skey
      local score, prev, subs = c.score, c.prev, c.subs
      if c.goal ~= nil and c.goal ~= op.goal then
        strength = math.max(0.0, strength - earned)
        earned, ldep = 0.0, 0.0
        lkey, skey, score, prev = nil, nil, nil, nil
        subs = {}
      end
      local key = {op.goal or '', op.sub}
      if not keq(skey, key) then prev, skey = score, key end
      local seen = false
      for _, s in ipairs(subs) do if s == op.sub then seen = true end end
      c.earned, c.ldep, c.lkey, c.skey, c.score, c.prev, c.goal, c.subs = earned, ldep, lkey, skey, op.score, prev, op.goal, subs
      if seen then
        c.s = strength
        outcome = 'already'
      else
        amount = capped(strength, DEP[op.score])
        if limit ~= nil then amount = math.min(amount, limit) end
        c.s, c.earned, c.ldep, c.lkey = strength + amount, earned + amount, amount, key
        subs[#subs + 1] = op.sub
        c.contrib[op.agent] = (c.contrib[op.agent] or 0.0) + amount
        c.n_dep, c.touched = c.n_dep + 1, at
        event(c, op.agent, 'deposit:' .. op.score, tick, amount, at)
        outcome = 'deposited'
      end
      sc.dirty[op.id] = true
    elseif op.t == 'reinforce' and op.source and (sc.edge_cache[op.id .. '\t' .. op.source] ~= nil
        or redis.call('HEXISTS', sc.edges, op.id .. '\t' .. op.source) == 1) then
      outcome = 'already'  -- once per (item, source)
    elseif op.t == 'reinforce' then
      local limit = limit_of(c, sc.cap, op.agent)
      settle(c, tick)
      amount = capped(c.s, op.delta and tonumber(op.delta) or RF)
      if limit ~= nil then amount = math.min(amount, limit) end
      c.s = c.s + amount
      c.contrib[op.agent] = (c.contrib[op.agent] or 0.0) + amount
      c.n_rf, c.touched = c.n_rf + 1, at
      event(c, op.agent, 'reinforce', tick, amount, at)
      sc.dirty[op.id] = true
      if op.source then
        local field = op.id .. '\t' .. op.source
        local w = sc.edge_cache[field]
        if w == nil then w = tonumber(redis.call('HGET', sc.edges, field) or '0') end
        sc.edge_cache[field] = w + EDGE
      end
      outcome = 'reinforced'
    elseif op.t == 'use' then
      c.users[op.agent] = tick
      if c.first == nil then c.first = {op.agent, op.build} end
      c.touched = at
      event(c, op.agent, 'use:' .. op.build, tick, 0.0, at)
      sc.dirty[op.id] = true
      outcome = 'used'
    elseif op.t == 'forget' or op.t == 'archive' then
      local status = (op.t == 'forget') and 'forgotten' or 'archived'
      if c.status ~= 'active' then
        outcome = 'conflict:' .. c.status
      else
        local h = holders(c, tick, op.agent)
        if #h > 0 then
          outcome = 'in_use:' .. h[1]
        else
          c.status, c.status_by = status, op.agent
          event(c, op.agent, status, tick, 0.0, at)
          sc.dirty[op.id] = true
          outcome = status
        end
      end
    elseif op.t == 'supersede' then
      if c.status ~= 'active' then
        outcome = 'conflict:' .. c.status
      else
        c.status, c.sup_by, c.status_by = 'superseded', op.by, op.agent
        event(c, op.agent, 'superseded:' .. op.by, tick, 0.0, at)
        sc.dirty[op.id] = true
        outcome = 'superseded'
      end
    elseif op.t == 'restore' then
      if c.status == 'active' then
        outcome = 'conflict:active'
      else
        c.status, c.sup_by, c.status_by, c.touched = 'active', nil, op.agent, at
        event(c, op.agent, 'restored', tick, 0.0, at)
        sc.dirty[op.id] = true
        outcome = 'restored'
      end
    else
      return redis.error_reply('unknown board operation ' .. tostring(op.t))
    end
  end
  out[i], amt[i] = outcome, fmt(amount)
end

-- ------------------------------------------------------------------ commit
for _, sc in ipairs(scopes) do
  local args = {}
  for id in pairs(sc.dirty) do
    args[#args + 1] = id
    args[#args + 1] = encode(sc.cache[id].c)
    if #args >= 1000 then  -- unpack() is bounded by Lua's stack
      redis.call('HSET', sc.cells, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('HSET', sc.cells, unpack(args)) end
  if sc.ticked then redis.call('HSET', sc.meta, 'tick', sc.tick) end
  for field, w in pairs(sc.edge_cache) do redis.call('HSET', sc.edges, field, fmt(w)) end
end
redis.call('SET', KEYS[1], '1', 'EX', cfg.batch_ttl)
return cjson.encode({dup = false, out = out, amt = amt})
