-- relevance-memory board: apply one batch of operations atomically (SPEC §5, §10).
--
-- A line-by-line mirror of relevance_memory/pheromone/_math.py (settle, deposit,
-- reinforce, capped_deposit) and relevance_memory/board/_apply.py (step); the board
-- contract and property tests prove both give bit-identical snapshots.
--
-- Stored form 3 (see relevance_memory/board/_packed.py): one MessagePack array per cell in
-- the scope's cells hash, numbers as MessagePack numbers (a double stays a double: exact,
-- no decimal formatting), false for "none", the task keys as their digests' 12 bytes (the
-- subtasks one string of them end to end, a key (goal, subtask) one string). Its first
-- slot is the form, 3: the script decodes the other 24 with unpack_limit from byte 4
-- straight into a table constructor (a table made at its size at once, no rehash per
-- slot; the constructor's first slot, unpack_limit's offset, is then set back to the
-- form), which costs half of cmsgpack.unpack of the array. The provenance events live
-- apart, in the scope's events hash, each event in a field of its own, "<id>\t<seq>" (seq
-- counts the item's events from 0; the cell's last slot is the next one): the item's
-- events are its newest events_kept seqs. A batch only writes them: one HSET of its new
-- events and one HDEL of the seqs that fell out of the newest events_kept; it never reads
-- an event. (Every string a script reads or makes costs ~2 ns a byte — Redis's Lua hashes
-- all of it — so bytes not read or made are the saving: the keys' hex text was nine
-- tenths of a cell.)
-- Stored form 2, written before: the task keys as hex text (see upgraded() below); read
-- into form 3 and written back so. Stored form 1, before it: 24 slots, no form slot, the
-- item's events one blob in the field "<id>"; a batch that writes such a cell moves its
-- newest events_kept into fields of their own, deletes the blob and writes it in form 3.
-- The scope's tick is the cells hash's field "" (no item id is empty), so each scope costs
-- a batch one HMGET of the tick and the cells it touches, one HSET of those it changed
-- (and the tick), one HSET of their new events and one HDEL of the oldest. Evaporation is
-- settled, in closed form, only for the cells a batch touches.
--
-- KEYS[1]            the batch marker (a retried batch id is applied once)
-- KEYS[3j-1 .. 3j+1] scope j's cells hash (its field "" the tick), edges hash, events hash
-- ARGV[1]            the batch: MessagePack {cap or false per scope}, then MessagePack {op...}:
--                    the ops one flat array, OPLEN slots an op (padded with false), its first
--                    slot the op's code (see _redis._pack_op; one table for the batch, not one
--                    per op), read as the values after its header into a table constructor
--                    (made at its size at once; cmsgpack.unpack grows it one slot at a time:
--                    -30 % of decoding it) unless it holds more than Lua's stack takes
-- The board's config is written into the script on the placeholder line below (RATES, INIT,
-- DEP, SMAX, RF, EDGE, PROTECT, EXEMPT, KEPT, LEASE, BATCH_TTL: see _redis._config_lua),
-- numbers as Python's shortest round-trip text, which Lua reads back to the same double.
-- Returns MessagePack {dup} or {false, {outcome...}, {amount...}}.
--
-- Nothing is written until every operation has been computed: a runtime error leaves
-- the board as it was (Redis does not roll a script back).

if redis.call('EXISTS', KEYS[1]) == 1 then
  return cmsgpack.pack({true})
end

--@CONFIG@
-- the globals the batch uses most, as locals (a global is a table lookup on every use)
local type, pairs, ipairs, unpack, HUGE = type, pairs, ipairs, unpack, math.huge
local max, min, find, ssub, slen = math.max, math.min, string.find, string.sub, string.len
local mpack, unpack_limit, call, spack = cmsgpack.pack, cmsgpack.unpack_limit, redis.call, struct.pack
local NONE = false
local OPLEN = 8
local P, BASE, NOPS  -- the ops, flat: op i's slots are P[o + 1 .. o + OPLEN], o = BASE + OPLEN * (i - 1)
local caps
do
  local payload, off, n, skip = ARGV[1], nil, nil, nil
  off, caps = unpack_limit(payload, 1)
  local head, b1, b2, b3, b4 = string.byte(payload, off + 1, off + 5)
  if head >= 0x90 and head <= 0x9f then n, skip = head - 0x90, 1  -- fixarray
  elseif head == 0xdc then n, skip = b1 * 256 + b2, 3  -- array16
  elseif head == 0xdd then n, skip = ((b1 * 256 + b2) * 256 + b3) * 256 + b4, 5  -- array32
  else return redis.error_reply('not a batch') end
  if n <= 4000 then
    P, BASE = {unpack_limit(payload, n, off + skip)}, 1  -- P[1]: unpack_limit's offset, then the n values
  else
    local _, all = unpack_limit(payload, 1, off)
    P, BASE = all, 0
  end
  NOPS = n / OPLEN
end
-- the op codes (_redis._pack_op)
local DEPOSIT, REINFORCE, ADD, USE, FORGET, ARCHIVE, SUPERSEDE, RESTORE, REPAIR, ADVANCE = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10

local function fmt(x) return string.format('%.17g', x) end

-- "<id>\t<seq>", the field of an item's event (_packed.event_fields): seq's digits made by
-- string.char, not by Lua's number-to-text (a number concatenated to a string is sprintf'd
-- with %.14g; a batch of 10 deposits makes 10 to 20 fields: -1.3 % of its server
-- instructions); the same text as Python's str(seq) for every integer seq >= 0
local char = string.char
local function event_field(id, s)
  if s < 10 then return id .. char(9, 48 + s) end
  local d0 = s % 10
  local r = (s - d0) / 10
  if r < 10 then return id .. char(9, 48 + r, 48 + d0) end
  local d1 = r % 10
  r = (r - d1) / 10
  if r < 10 then return id .. char(9, 48 + r, 48 + d1, 48 + d0) end
  local d2 = r % 10
  r = (r - d2) / 10
  if r < 10 then return id .. char(9, 48 + r, 48 + d2, 48 + d1, 48 + d0) end
  return id .. string.format('\t%d', s)  -- 10,000 and over (%d: exact below 2^63)
end

-- ------------------------------------------------------------------ cells
-- A cell is its unpacked array, worked on in place (no table per field, no conversion):
-- false in a slot is "none". Slots (see _packed.py):
local FORM, KIND, BORN, S, AT, EARNED, LDEP, SUBS, PRODUCER, CREATED, TOUCHED = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
local STATUS, CONTRIB, NDEP, NRF, USERS, SCORE, GOAL, LKEY, SKEY, PREV = 12, 13, 14, 15, 16, 17, 18, 19, 20, 21
local SUPBY, STATUSBY, FIRST, NEV = 22, 23, 24, 25
-- FORM: 3 (1: read from form 1, written back as 3); SUBS: the subtask keys' digests (12
-- bytes each, see _packed) end to end (a membership test is a plain string.find at a
-- multiple of 12); GOAL: the goal's digest; LKEY, SKEY: a key (goal, subtask) as one
-- string, the goal's digest (none: '') then the subtask's (equal keys: equal strings); NEV: the seq
-- of the item's next event (form 1: how many events its blob holds).
local HEAD3, HEAD2, HEAD1 = '\220\0\25\3', '\220\0\25\2', '\220\0\24'  -- array16 of 25, the form; array16 of 24
local DIGEST = 12  -- bytes of a task key's digest
local DEPOSITED = {'deposit:1', 'deposit:2', 'deposit:3', 'deposit:4', 'deposit:5'}

local function valid(c)  -- inline and on locals: it runs for every cell a batch names
  if type(c) ~= 'table' or #c ~= 25 then return false end
  local form, s, e, l, n = c[FORM], c[S], c[EARNED], c[LDEP], c[NEV]
  return (form == 3 or form == 1) and RATES[c[KIND]] ~= nil  -- RATES' keys are the kinds, strings
    and type(s) == 'number' and s == s and s ~= HUGE and s ~= -HUGE
    and type(e) == 'number' and e == e and e ~= HUGE and e ~= -HUGE
    and type(l) == 'number' and l == l and l ~= HUGE and l ~= -HUGE
    and type(c[BORN]) == 'number' and type(c[AT]) == 'number'
    and type(c[SUBS]) == 'string' and #c[SUBS] % DIGEST == 0
    and type(c[CONTRIB]) == 'table' and type(c[USERS]) == 'table'
    and type(n) == 'number' and n >= 0 and n % 1 == 0
end

-- valid(c) without its type() calls (a C call each, ~8 % of a batch's server instructions):
-- the same answer for every cell it answers for, and an error for one whose checked slot
-- has another type (Lua 5.1 refuses to order a number and a non-number, and to index a
-- number or a boolean; arithmetic is not used: it would take a numeric string for a number).
-- Only decode_all calls it, inside a pcall: on an error every cell of the scope is decoded
-- again one pcall each, through valid().
local function valid_or_error(c)
  if #c ~= 25 then return false end
  local form, s, e, l, n = c[FORM], c[S], c[EARNED], c[LDEP], c[NEV]
  local born, at, subs = c[BORN], c[AT], c[SUBS]
  return (form == 3 or form == 1) and RATES[c[KIND]] ~= nil
    and -HUGE < s and s < HUGE and -HUGE < e and e < HUGE and -HUGE < l and l < HUGE  -- finite numbers
    and (born <= HUGE or born ~= born) and (at <= HUGE or at ~= at)  -- numbers (NaN too, as valid)
    and subs.len == slen and #subs % DIGEST == 0  -- a string (its metatable's len; a table has none)
    and c[CONTRIB].len ~= slen and c[USERS].len ~= slen  -- tables (no string, and no function in a table)
    and n >= 0 and n % 1 == 0
end

local BAD = {}  -- a scope's cache holds per id the cell, false (no such item) or BAD (corrupt)

-- forms 1 and 2 held the task keys as hex text: a key's 24 hex digits, the subtasks each
-- followed by '\n' after a first '\n', a key (goal, subtask) an array {goal or '', subtask}
local function unhex(h)  -- 24 lowercase hex digits → their 12 bytes (an error: not a digest)
  if type(h) ~= 'string' or #h ~= 24 or find(h, '[^0-9a-f]') then error('not a task key digest') end
  local b = {}
  for k = 1, 23, 2 do b[#b + 1] = tonumber(ssub(h, k, k + 1), 16) end
  return string.char(unpack(b))
end

local function unhex_key(k)
  if k == NONE then return NONE end
  return (k[1] == '' and '' or unhex(k[1])) .. unhex(k[2])
end

local function upgraded(c)  -- a form-1/2 cell (its table) with its task keys as form 3 holds them
  local subs, keys = {}, string.match(c[SUBS], '^\n*(.-)\n*$')  -- as Python's strip('\n')
  if find(keys, '\n\n', 1, true) then error('an empty subtask key') end
  for h in string.gmatch(keys, '[^\n]+') do subs[#subs + 1] = unhex(h) end
  c[SUBS] = table.concat(subs)
  if c[GOAL] ~= NONE then c[GOAL] = unhex(c[GOAL]) end
  c[LKEY], c[SKEY] = unhex_key(c[LKEY]), unhex_key(c[SKEY])
  return c
end

local function unpacked(raw)  -- the cell's table (form 1: its slots after a first slot 1), or nil; errors: not a cell
  local head = ssub(raw, 1, 4)
  if head == HEAD3 then
    local c = {unpack_limit(raw, 24, 4)}
    if c[FORM] == -1 then c[FORM] = 3; return c end  -- -1: nothing after the 24 slots
    return nil
  end
  if head == HEAD2 then  -- form 2: read as form 3 (its events are already in fields of their own)
    local c = {unpack_limit(raw, 24, 4)}
    if c[FORM] == -1 then c[FORM] = 3; return upgraded(c) end
    return nil
  end
  if ssub(raw, 1, 3) == HEAD1 then return upgraded({1, unpack(cmsgpack.unpack(raw), 1, 24)}) end
  return nil
end

-- valid(c) checks the contributions and users are tables, not what they hold (that would
-- cost every cell of every batch a loop); a Repair, sent when Python's reader found the cell
-- corrupt, checks them too, so a cell whose contribution is not a finite number (which
-- Python's reader refuses) is written back instead of left for every later batch to trip on.
local function readable_maps(c)
  for _, v in pairs(c[CONTRIB]) do
    if type(v) ~= 'number' or v ~= v or v == HUGE or v == -HUGE then return false end
  end
  for _, v in pairs(c[USERS]) do
    if type(v) ~= 'number' or v % 1 ~= 0 then return false end
  end
  return true
end

local function decode(raw)  -- cell, corrupt
  if not raw then return nil, false end
  local ok, c = pcall(unpacked, raw)
  if ok and valid(c) then return c, false end
  return nil, true
end

local function decode_all(sc)  -- every cell the batch names, in one pcall (a pcall is a sigsetjmp)
  local cache = sc.cache
  for id, raw in pairs(sc.raw) do
    if raw then
      local c = unpacked(raw)
      if c ~= nil and valid_or_error(c) then cache[id] = c else cache[id] = BAD end
    else
      cache[id] = false
    end
  end
end

-- ------------------------------------------------------------------ SPEC §5 (mirrors _pheromone_math)
local function evaporating_ticks(c, tick)
  if c[AT] >= tick then return 0 end
  if c[SCORE] ~= NONE and c[SCORE] >= EXEMPT then return 0 end
  return max(0, tick - max(c[AT], c[BORN] + PROTECT))
end

local function settle(c, tick)
  if c[AT] >= tick then return end
  local n = evaporating_ticks(c, tick)
  if n > 0 then
    local f = (1.0 - RATES[c[KIND]]) ^ n
    c[S], c[EARNED], c[LDEP] = c[S] * f, c[EARNED] * f, c[LDEP] * f
  end
  c[AT] = tick
end

local function capped(strength, delta)
  return delta * max(0.0, 1.0 - strength / SMAX)
end

local function limit_of(c, cap, agent)
  if cap == nil then return nil end
  return max(0.0, cap - (c[CONTRIB][agent] or 0.0))
end

local function seen_in(subs, sub)  -- the digest sub is one of subs' (a match at a multiple of 12)
  local at = find(subs, sub, 1, true)
  while at ~= nil do
    if at % DIGEST == 1 then return true end
    at = find(subs, sub, at + 1, true)
  end
  return false
end

local function holders(c, tick, other_than)
  local out = {}
  for a, t in pairs(c[USERS]) do
    if a ~= other_than and tick - t <= LEASE then out[#out + 1] = a end
  end
  table.sort(out)
  return out
end

-- ------------------------------------------------------------------ the batch
local scopes = {}
local wanted = {}
for j, cap in ipairs(caps) do
  local base = 3 * j - 1
  scopes[j] = {cells = KEYS[base], edges = KEYS[base + 1], events = KEYS[base + 2],
               cap = cap ~= NONE and cap or nil, tick = 0,
               cache = {}, raw = {}, dirty = {}, edge_cache = {}, new_events = {}, reset = {}, ticked = false}
  wanted[j] = {''}
end

-- one HMGET per scope: its tick and every cell the batch names (decoded when first used)
for o = BASE, BASE + OPLEN * (NOPS - 1), OPLEN do
  if P[o + 1] ~= ADVANCE then
    local ids, id = wanted[P[o + 2]], P[o + 3]
    if not ids[id] then ids[id] = true; ids[#ids + 1] = id end
  end
end
for j, ids in ipairs(wanted) do
  local sc = scopes[j]
  for lo = 1, #ids, 1000 do
    local got = call('HMGET', sc.cells, unpack(ids, lo, min(#ids, lo + 999)))
    for k = 1, #got do sc.raw[ids[lo + k - 1]] = got[k] end
  end
  sc.tick = tonumber(sc.raw[''] or '0')
  sc.raw[''] = nil
  if not pcall(decode_all, sc) then  -- a cell does not decode: find which, one pcall each
    for id, raw in pairs(sc.raw) do
      local c, corrupt = decode(raw)
      sc.cache[id] = c or (corrupt and BAD)
    end
  end
end

local function event(sc, id, agent, op, tick, amount, at)
  if KEPT == 0 then return end
  local list = sc.new_events[id]
  if list == nil then list = {}; sc.new_events[id] = list end
  if #agent < 32 and #op < 32 then  -- MessagePack written by struct.pack: no table, no type walk
    -- (fixarray of 5, two fixstr, three float64: what Python reads back is the same values)
    list[#list + 1] = spack('>BBc0Bc0BdBdBd', 0x95, 0xa0 + #agent, agent, 0xa0 + #op, op, 0xcb, tick,
                            0xcb, amount, 0xcb, at)
  else
    list[#list + 1] = mpack({agent, op, tick, amount, at})  -- one string (mpack(a, b, ...) makes one per value)
  end
end

local out, amt = {}, {}
for i = 1, NOPS do
  local o = BASE + OPLEN * (i - 1)
  local t, sc = P[o + 1], scopes[P[o + 2]]
  local tick = sc.tick
  local outcome, amount = nil, 0.0
  if t == ADVANCE then
    if P[o + 4] ~= NONE then sc.tick = max(tick, P[o + 4]) else sc.tick = tick + P[o + 3] end
    sc.ticked = true
    outcome = 'advanced'
  else
    local id, agent = P[o + 3], P[o + 4]
    local c = sc.cache[id]
    local corrupt = c == BAD
    if corrupt or not c then c = nil end
    if t == REPAIR then
      if c ~= nil and readable_maps(c) then
        outcome = 'readable'
      else
        local fixed = P[o + 5]
        if not valid(fixed) then return redis.error_reply('repair of ' .. id .. ': not a cell') end
        fixed[NEV], fixed[FORM] = 0, 3  -- what Python writes is form 3
        sc.cache[id] = fixed
        sc.dirty[id] = true
        sc.reset[id] = true  -- the repaired cell's events replace whatever the entry held
        local list = {}
        if KEPT > 0 then for k, e in ipairs(P[o + 6]) do list[k] = mpack(e) end end
        sc.new_events[id] = list
        outcome = 'repaired'
      end
    elseif corrupt then
      outcome = 'corrupt'
    elseif t == ADD then
      local at = P[o + 5]
      if c ~= nil then
        outcome = 'exists'
      else
        local s = P[o + 7] ~= NONE and P[o + 7] or INIT[P[o + 6]]
        c = {3, P[o + 6], tick, s, tick, 0.0, 0.0, '', agent, at, at, 'active', {}, 0, 0, {},
             NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE, 0}
        event(sc, id, agent, 'add', tick, s, at)
        sc.cache[id] = c
        sc.dirty[id] = true
        outcome = 'added'
      end
    elseif c == nil then
      outcome = 'missing'
    elseif t == DEPOSIT then
      local at, score, sub, goal = P[o + 5], P[o + 6], P[o + 7], P[o + 8]
      local limit = limit_of(c, sc.cap, agent)
      settle(c, tick)
      local strength, earned, ldep = c[S], c[EARNED], c[LDEP]
      local lkey, skey = c[LKEY], c[SKEY]
      local cscore, prev, subs = c[SCORE], c[PREV], c[SUBS]
      if c[GOAL] ~= NONE and c[GOAL] ~= goal then
        strength = max(0.0, strength - earned)
        earned, ldep = 0.0, 0.0
        lkey, skey, cscore, prev = NONE, NONE, NONE, NONE
        subs = ''
      end
      local key = (goal or '') .. sub
      if skey ~= key then prev, skey = cscore, key end
      local seen = seen_in(subs, sub)
      c[EARNED], c[LDEP], c[LKEY], c[SKEY], c[SCORE], c[PREV], c[GOAL], c[SUBS] =
        earned, ldep, lkey, skey, score, prev, goal, subs
      if seen then
        c[S] = strength
        outcome = 'already'
      else
        amount = capped(strength, DEP[score])
        if limit ~= nil then amount = min(amount, limit) end
        c[S], c[EARNED], c[LDEP], c[LKEY] = strength + amount, earned + amount, amount, key
        c[SUBS] = subs .. sub
        c[CONTRIB][agent] = (c[CONTRIB][agent] or 0.0) + amount
        c[NDEP], c[TOUCHED] = c[NDEP] + 1, at
        event(sc, id, agent, DEPOSITED[score], tick, amount, at)
        outcome = 'deposited'
      end
      sc.dirty[id] = true
    elseif t == REINFORCE and P[o + 6] ~= NONE and (sc.edge_cache[id .. '\t' .. P[o + 6]] ~= nil
        or call('HEXISTS', sc.edges, id .. '\t' .. P[o + 6]) == 1) then
      outcome = 'already'  -- once per (item, source)
    elseif t == REINFORCE then
      local at, source, delta = P[o + 5], P[o + 6], P[o + 7]
      local limit = limit_of(c, sc.cap, agent)
      settle(c, tick)
      amount = capped(c[S], delta ~= NONE and delta or RF)
      if limit ~= nil then amount = min(amount, limit) end
      c[S] = c[S] + amount
      c[CONTRIB][agent] = (c[CONTRIB][agent] or 0.0) + amount
      c[NRF], c[TOUCHED] = c[NRF] + 1, at
      event(sc, id, agent, 'reinforce', tick, amount, at)
      sc.dirty[id] = true
      if source ~= NONE then
        local field = id .. '\t' .. source
        local w = sc.edge_cache[field]
        if w == nil then w = tonumber(call('HGET', sc.edges, field) or '0') end
        sc.edge_cache[field] = w + EDGE
      end
      outcome = 'reinforced'
    elseif t == USE then
      local at, build = P[o + 5], P[o + 6]
      c[USERS][agent] = tick
      if c[FIRST] == NONE then c[FIRST] = {agent, build} end
      c[TOUCHED] = at
      event(sc, id, agent, string.format('use:%d', build), tick, 0.0, at)
      sc.dirty[id] = true
      outcome = 'used'
    elseif t == FORGET or t == ARCHIVE then
      local status = (t == FORGET) and 'forgotten' or 'archived'
      if c[STATUS] ~= 'active' then
        outcome = 'conflict:' .. c[STATUS]
      else
        local h = holders(c, tick, agent)
        if #h > 0 then
          outcome = 'in_use:' .. h[1]
        else
          c[STATUS], c[STATUSBY] = status, agent
          event(sc, id, agent, status, tick, 0.0, P[o + 5])
          sc.dirty[id] = true
          outcome = status
        end
      end
    elseif t == SUPERSEDE then
      if c[STATUS] ~= 'active' then
        outcome = 'conflict:' .. c[STATUS]
      else
        c[STATUS], c[SUPBY], c[STATUSBY] = 'superseded', P[o + 6], agent
        event(sc, id, agent, 'superseded:' .. P[o + 6], tick, 0.0, P[o + 5])
        sc.dirty[id] = true
        outcome = 'superseded'
      end
    elseif t == RESTORE then
      if c[STATUS] == 'active' then
        outcome = 'conflict:active'
      else
        c[STATUS], c[SUPBY], c[STATUSBY], c[TOUCHED] = 'active', NONE, agent, P[o + 5]
        event(sc, id, agent, 'restored', tick, 0.0, P[o + 5])
        sc.dirty[id] = true
        outcome = 'restored'
      end
    else
      return redis.error_reply('unknown board operation ' .. tostring(t))
    end
  end
  out[i], amt[i] = outcome, amount
end

-- ------------------------------------------------------------------ commit
local function hset_all(key, args)
  for lo = 1, #args, 1000 do  -- unpack() is bounded by Lua's stack
    call('HSET', key, unpack(args, lo, min(#args, lo + 999)))
  end
end

-- a form-1 cell's events (its blob, newest last; count: how many it holds): the newest
-- KEPT, each its packed bytes (the blob is cut at event boundaries, nothing re-packed)
local function blob_events(blob, count)
  local out = {}
  if not blob or KEPT == 0 then return out end
  local off = 0
  if count > KEPT then off = unpack_limit(blob, count - KEPT) end
  while off >= 0 and off < #blob do
    local nxt = unpack_limit(blob, 1, off)
    out[#out + 1] = ssub(blob, off + 1, nxt >= 0 and nxt or #blob)
    off = nxt
  end
  return out
end

for _, sc in ipairs(scopes) do
  local sets, dels = {}, {}
  for id in pairs(sc.dirty) do
    local c = sc.cache[id]
    if sc.reset[id] then
      dels[#dels + 1] = id  -- a repaired item may have been of form 1: its blob goes
    elseif c[FORM] == 1 then  -- form 1: its events move into fields of their own
      local ok, old = pcall(blob_events, call('HGET', sc.events, id), c[NEV])
      if not ok then old = {} end  -- events that do not decode are left out (as a snapshot leaves them)
      for _, e in ipairs(sc.new_events[id] or {}) do old[#old + 1] = e end
      sc.new_events[id] = old
      sc.reset[id] = true
      c[NEV], c[FORM] = 0, 3
      dels[#dels + 1] = id
    end
  end
  -- events first: they move each cell's next seq
  for id, list in pairs(sc.new_events) do
    local c = sc.cache[id]
    local n = c[NEV]
    local m = n + #list
    for s = max(n, m - KEPT), m - 1 do
      sets[#sets + 1] = event_field(id, s)
      sets[#sets + 1] = list[s - n + 1]
    end
    if not sc.reset[id] then  -- the seqs that fell out of the newest KEPT
      for s = max(0, n - KEPT), min(n, m - KEPT) - 1 do dels[#dels + 1] = event_field(id, s) end
    end
    c[NEV] = m
    sc.dirty[id] = true
  end
  if #sets > 0 then hset_all(sc.events, sets) end
  for lo = 1, #dels, 1000 do call('HDEL', sc.events, unpack(dels, lo, min(#dels, lo + 999))) end
  local args = {}
  if sc.ticked then args[1], args[2] = '', sc.tick end
  for id in pairs(sc.dirty) do
    args[#args + 1] = id
    args[#args + 1] = mpack(sc.cache[id])
  end
  if #args > 0 then hset_all(sc.cells, args) end
  for field, w in pairs(sc.edge_cache) do call('HSET', sc.edges, field, fmt(w)) end
end
call('SET', KEYS[1], '1', 'EX', BATCH_TTL)
return mpack({false, out, amt})
