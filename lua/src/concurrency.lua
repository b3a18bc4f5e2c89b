-- Concurrency limiter (core/src/concurrency.rs): leases by id, each expiring lease_ms after
-- its last ACQUIRE. The twin reads every lease (a version 2 lease table, or a version 1
-- list), decides as the core does, and writes the leases as a new table laid out as the
-- module's `lease_table::build` (src/encoding/lease_table): the module then changes that
-- table in place, and the twin reads what the module changed.

M.CC = { tag = "C" }
M.ALGO.C = M.CC

local NONE = 65535

local function u16(v, at)
  local a, b = byte(v, at, at + 1)
  return a + b * 256
end

local function u16_bytes(n)
  return char(n % 256, floor(n / 256))
end

-- The home record of an id: FNV-1a 64 of its bytes modulo the capacity (a power of two up
-- to 2^15), so only the hash's low 16 bits are needed, which 16-bit arithmetic gives
-- exactly (the offset basis and the prime taken modulo 2^16).
local function home(id, mask)
  local bxor = bit.bxor
  local h = 0x2325
  for i = 1, #id do
    h = (bxor(h, byte(id, i)) * 0x01b3) % 65536
  end
  return h % (mask + 1)
end

-- A version 2 table's leases, soonest expiry first, or nil when it is not consistent (the
-- checks of `Table::parse` and `Table::leases`).
local function table_leases(v)
  if #v < 17 then
    return nil
  end
  local width, capacity, live, used = u16(v, 6), u16(v, 8), u16(v, 10), u16(v, 12)
  local head, tail = u16(v, 14), u16(v, 16)
  local record = 14 + width
  local pow2 = capacity >= 2 and capacity <= 32768 and 2 ^ floor(math.log(capacity) / math.log(2) + 0.5) == capacity
  if width < 1 or width > M.MAX_ID_LEN or not pow2 or #v ~= 17 + capacity * record
    or live > used or used >= capacity or (live == 0) ~= (head == NONE) or (live == 0) ~= (tail == NONE) then
    return nil
  end
  local ids, exp = {}, {}
  local cur, prev = head, NONE
  while cur ~= NONE do
    if cur >= capacity or #ids >= live then
      return nil
    end
    local at = 18 + cur * record
    local state, len = byte(v, at, at + 1)
    if state ~= 1 or u16(v, at + 2) ~= prev then
      return nil
    end
    local expires = M.read_u64(v, at + 6)
    if not expires or len + 1 > width then
      return nil
    end
    ids[#ids + 1] = sub(v, at + 14, at + 14 + len)
    exp[#exp + 1] = expires
    prev, cur = cur, u16(v, at + 4)
  end
  if #ids ~= live or prev ~= tail then
    return nil
  end
  return { ids = ids, exp = exp }
end

-- A version 1 list's leases (src/encoding/concurrency.rs), or nil when malformed.
local function list_leases(v)
  local ids, exp = {}, {}
  local pos, at = 6, 0
  while pos <= #v do
    if #ids >= M.KINDS.C.params[1][3] then
      return nil
    end
    local delta, len
    delta, pos = M.read_varint(v, pos)
    if not delta then
      return nil
    end
    len, pos = M.read_varint(v, pos)
    if not len or len < 1 or len > M.MAX_ID_LEN or pos + len - 1 > #v then
      return nil
    end
    at = at + delta
    ids[#ids + 1] = sub(v, pos, pos + len - 1)
    exp[#exp + 1] = at
    pos = pos + len
  end
  return { ids = ids, exp = exp }
end

function M.CC.read(key)
  local v = M.read_value(key, "C")
  if not v then
    return nil
  end
  local s
  if byte(v, 4) == 2 then
    s = table_leases(v)
  else
    s = list_leases(v)
  end
  if not s then
    M.corrupt("C")
  end
  for i = 1, #s.exp do
    if s.exp[i] > M.LATEST_US then
      M.corrupt("C")
    end
  end
  return s
end

-- The leases live at `now`, soonest expiry first (a stable sort, as the core's).
local function live(s, now)
  local ids, exp = {}, {}
  if s then
    for i = 1, #s.ids do
      if s.exp[i] > now then
        local k = #ids + 1
        while k > 1 and exp[k - 1] > s.exp[i] do
          ids[k], exp[k] = ids[k - 1], exp[k - 1]
          k = k - 1
        end
        ids[k], exp[k] = s.ids[i], s.exp[i]
      end
    end
  end
  return { ids = ids, exp = exp }
end

-- The leases as a new lease table (src/encoding/lease_table/write.rs `build`).
function M.CC.encode(s)
  local count = #s.ids
  local width = 1
  for i = 1, count do
    if #s.ids[i] > width then
      width = #s.ids[i]
    end
  end
  local capacity = 2
  while capacity < 2 * count and capacity < 32768 do
    capacity = capacity * 2
  end
  local record = 14 + width
  local mask = capacity - 1
  local taken, slots = {}, {}
  for i = 1, count do
    local slot = home(s.ids[i], mask)
    while taken[slot] do
      slot = (slot + 1) % capacity
    end
    taken[slot] = i
    slots[i] = slot
  end
  local empty = string.rep("\0", record)
  local parts = {
    "\0RL\2C", u16_bytes(width), u16_bytes(capacity), u16_bytes(count), u16_bytes(count),
    u16_bytes(slots[1] or NONE), u16_bytes(slots[count] or NONE),
  }
  for slot = 0, capacity - 1 do
    local i = taken[slot]
    if i then
      local id = s.ids[i]
      parts[#parts + 1] = char(1, #id - 1) .. u16_bytes(slots[i - 1] or NONE) .. u16_bytes(slots[i + 1] or NONE)
        .. M.u64_bytes(s.exp[i]) .. id .. string.rep("\0", width - #id)
    else
      parts[#parts + 1] = empty
    end
  end
  return table.concat(parts)
end

-- Stores the leases, the key expiring once the last of them has (plus the TTL slack).
local function store(key, s)
  local last = s.exp[#s.exp]
  M.write(key, M.CC.encode(s), 0, M.ceil_div(last, 1000))
end

function M.CC.acquire(s, now, limit, lease_ms, id)
  local leases = live(s, now)
  local n = #leases.ids
  local held = false
  for i = 1, n do
    if leases.ids[i] == id then
      held = true
    end
  end
  if not held and n >= limit then
    local frees = leases.exp[n - limit + 1] or now
    local wait = frees > now and M.ceil_div(frees - now, 1000) or 0
    return M.decision(false, limit, 0, wait, 0)
  end
  local ids, exp = {}, {}
  for i = 1, n do
    if leases.ids[i] ~= id then
      ids[#ids + 1], exp[#exp + 1] = leases.ids[i], leases.exp[i]
    end
  end
  local expires = now + lease_ms * 1000
  local at = #ids + 1
  while at > 1 and exp[at - 1] > expires do
    at = at - 1
  end
  table.insert(ids, at, id)
  table.insert(exp, at, expires)
  local count = #ids
  return M.decision(true, limit, limit > count and limit - count or 0, 0, 0), { ids = ids, exp = exp }
end

-- RL.STATE's fields (core/src/concurrency.rs `view`).
function M.CC.view(s, now)
  local held, next_ms, last_ms = 0, 0, 0
  local n = #s.exp
  for i = 1, n do
    if s.exp[i] > now then
      held = held + 1
      if next_ms == 0 then
        next_ms = M.ceil_div(s.exp[i], 1000)
      end
    end
  end
  if n > 0 and s.exp[n] > now then
    last_ms = M.ceil_div(s.exp[n], 1000)
  end
  return { "held", held, "next_expiry_ms", next_ms, "last_expiry_ms", last_ms }
end

local OPERATION = "ERR expected 'limit lease_ms ACQUIRE id' or 'RELEASE id' after the key"

local function check_id(id)
  if #id < 1 or #id > M.MAX_ID_LEN then
    M.fail("ERR id must be between 1 and " .. M.MAX_ID_LEN .. " bytes long")
  end
  return id
end

-- RL.CONCURRENCY key limit lease_ms ACQUIRE id [PEEK] | RL.CONCURRENCY key RELEASE id.
function M.run_concurrency(name, args)
  local n = #args
  if #M.KEYS ~= 1 or (n ~= 3 and n < 5) then
    M.arity(name)
  end
  local key = M.KEYS[1]
  if n == 3 then
    if args[2]:upper() ~= "RELEASE" then
      M.fail(OPERATION)
    end
    local id = check_id(args[3])
    local s = M.CC.read(key)
    local now = M.now_us()
    local leases = live(s, now)
    local ids, exp, found = {}, {}, false
    for i = 1, #leases.ids do
      if leases.ids[i] == id then
        found = true
      else
        ids[#ids + 1], exp[#exp + 1] = leases.ids[i], leases.exp[i]
      end
    end
    if not found then
      return 0
    end
    if #ids == 0 then
      call("DEL", key)
    else
      store(key, { ids = ids, exp = exp })
    end
    return 1
  end
  if args[4]:upper() ~= "ACQUIRE" then
    M.fail(OPERATION)
  end
  local v = M.positional("C", args, 2)
  local id = check_id(args[5])
  local peek = false
  for i = 6, n do
    if args[i]:upper() ~= "PEEK" then
      M.fail("ERR unknown option '" .. M.shown(args[i]) .. "', expected PEEK")
    elseif peek then
      M.fail_repeated("PEEK")
    end
    peek = true
  end
  local s = M.CC.read(key)
  local now = M.now_us()
  local d, new = M.CC.acquire(s, now, v[1], v[2], id)
  if new and not peek then
    store(key, new)
  end
  return M.reply(d)
end
M.COMMANDS["RL.CONCURRENCY"] = M.run_concurrency

-- The fast path (see fast.lua) of `RL.CONCURRENCY key limit lease_ms ACQUIRE id` on a
-- missing key or a lease table: M.CC.acquire and M.CC.encode in one function on plain
-- numbers, the table's records read with `struct` at computed offsets and its home slots
-- by id cached. The result is the general path's, byte for byte: a new table of the live
-- leases (it is laid out from the leases, so it is rebuilt whole).
local CC_TREE, CC_RANGES = M.fast_tree(), M.KINDS.C.params
local CC_HEAD = sunpack("<I5", "\0RL\2C")
local CC_LONGEST, CC_LAST = M.MAX_LEN.C, fmt("%d", M.MAX_LEN.C)
local MAX_ID_LEN, LATEST_US = M.MAX_ID_LEN, M.LATEST_US
local REPLY = M.FAST_REPLY
-- A record's format by the length of its id (the id packed as `c<length>`).
local RECORD = {}
for len = 1, MAX_ID_LEN do
  RECORD[len] = "<BBI2I2I8c" .. len
end
local POW2, HOMES, homes = {}, {}, 0
for i = 1, 15 do
  POW2[2 ^ i] = true
end
local ZEROS = {}
local function zeros(n)
  local z = ZEROS[n]
  if not z then
    z = string.rep("\0", n)
    ZEROS[n] = z
  end
  return z
end

-- FNV-1a 64 of the id, low 16 bits (see `home`), cached by id.
local function fnv16(id)
  local h = HOMES[id]
  if not h then
    h = home(id, 65535)
    homes = homes + 1
    if homes > 1024 then
      HOMES, homes = {}, 0
    end
    HOMES[id] = h
  end
  return h
end

-- Scratch tables of the fast code (a new table costs an allocation and a rehash per size
-- doubling): only the entries a call sets are read, `taken` is emptied after use (new
-- tables if a call stopped before that: `dirty`), and tables grown past 64 leases are let go.
local IDS, EXP, TAKEN, SLOTS, PARTS = {}, {}, {}, {}, {}
local dirty = false

local function cc_prepare(limit, lease_ms)
  return lease_ms * 1000 < M.FAST_MAX and { limit, lease_ms * 1000 }
end

-- Offsets as text (see M.FAST_TEXT), at most one per record of the longest table.
local OFFSETS = {}
local function offset_text(at)
  local text = fmt("%d", at)
  OFFSETS[at] = text
  return text
end

-- Writes the `n` leases of IDS and EXP as M.CC.encode and store do; false when the server
-- refused the write.
local function cc_store(key, n)
  local ids, exp = IDS, EXP
  local width = 1
  for i = 1, n do
    if #ids[i] > width then
      width = #ids[i]
    end
  end
  local capacity = 2
  while capacity < 2 * n and capacity < 32768 do
    capacity = capacity * 2
  end
  if dirty then
    TAKEN, SLOTS, PARTS = {}, {}, {}
  end
  dirty = true
  local taken, slots, parts = TAKEN, SLOTS, PARTS
  slots[n + 1] = nil
  for i = 1, n do
    local slot = (HOMES[ids[i]] or fnv16(ids[i])) % capacity
    while taken[slot] do
      slot = (slot + 1) % capacity
    end
    taken[slot], slots[i] = i, slot
  end
  parts[1] = spack("<I5I2I2I2I2I2I2", CC_HEAD, width, capacity, n, n, slots[1], slots[n])
  local empty = zeros(14 + width)
  for slot = 0, capacity - 1 do
    local i = taken[slot]
    if i then
      local lease = ids[i]
      local size = #lease
      local r = spack(RECORD[size], 1, size - 1, slots[i - 1] or NONE, slots[i + 1] or NONE, exp[i], lease)
      parts[slot + 2] = size < width and r .. zeros(width - size) or r
    else
      parts[slot + 2] = empty
    end
  end
  local value = table.concat(parts, "", 1, capacity + 1)
  for i = 1, n do
    taken[slots[i]] = nil
  end
  dirty = false
  if n > 64 then
    IDS, EXP, TAKEN, SLOTS, PARTS = {}, {}, {}, {}, {}
  end
  local at = exp[n] / 1000
  at = at - at % 1
  at = (at * 1000 < exp[n] and at + 1 or at) + M.TTL_SLACK_MS
  return not pcall_redis("SET", key, value, "PXAT", M.FAST_TEXT and fmt("%d", at) or at).err
end

-- `RL.CONCURRENCY key limit lease_ms ACQUIRE id` and `RL.CONCURRENCY key RELEASE id`.
-- Direct fast code (M.FAST_DIRECT): the table is read at offsets checked against its
-- length, and a refused server call returns nil (a refused second write of a renewal leaves
-- the general path a table it renews the same way).
M.FAST_DIRECT["RL.CONCURRENCY"] = function(key, args)
  local count = #args
  local release = count == 3 and args[2] == "RELEASE"
  local id = release and args[3] or args[5]
  if not release and (count ~= 5 or args[4] ~= "ACQUIRE") or #id < 1 or #id > MAX_ID_LEN then
    return nil
  end
  local p
  if not release then
    p = (CC_TREE[args[2]] or EMPTY)[args[3]]
    if p == nil then
      p = M.fast_parse(CC_TREE, args, 2, CC_RANGES, cc_prepare)
    end
    if not p then
      return nil
    end
  end
  -- The key and the clock read inline (a Lua call costs about as much as ten lines of arithmetic), every
  -- server call through redis.pcall: a failed one is a table with `err` (a string's `err`
  -- is the string library's: nil).
  local v = pcall_redis("GETRANGE", key, "0", CC_LAST)
  if v == "" and pcall_redis("EXISTS", key) ~= 0 or v.err then
    return nil
  end
  local t = pcall_redis("TIME")
  if t.err then
    return nil
  end
  if t[1] ~= clock_s then
    clock_s, clock_us = t[1], t[1] * 1000000
  end
  local now = clock_us + t[2]
  -- The live leases of the table (IDS, EXP: soonest expiry first) but `id`'s, their number
  -- `n`, whether `id` holds one, and `in_place`: where `id`'s record starts (its 1-based
  -- offset) when the table can take the id's new expiry in place (the id's lease is the
  -- newest, the list's tail, and no lease in the table has expired), else false. Nil when
  -- the general path must read the table. (Inline: a Lua call costs about as much as ten
  -- lines of arithmetic.)
  local ids, exp, n, held, in_place = IDS, EXP, 0, false, false
  local len = #v
  if len > 0 then
    if len < 17 or len > CC_LONGEST then
      return nil
    end
    local head, width, capacity, held_n, used, first, last = sunpack("<I5I2I2I2I2I2I2", v)
    local record = 14 + width
    if head ~= CC_HEAD or width < 1 or width > MAX_ID_LEN or not POW2[capacity]
      or len ~= 17 + capacity * record or held_n > used or used >= capacity
      or (held_n == 0) ~= (first == NONE) or (held_n == 0) ~= (last == NONE) then
      return nil
    end
    local cur, prev, seen, previous, tail_at = first, NONE, 0, 0, false
    while cur ~= NONE do
      if cur >= capacity or seen >= held_n then
        return nil
      end
      local at = 18 + cur * record
      local state, size, back, nxt, e = sunpack("<BBI2I2I8", v, at)
      if state ~= 1 or back ~= prev or size + 1 > width or e >= LATEST_US or e < previous then
        return nil
      end
      if e > now then
        local lease = sub(v, at + 14, at + 14 + size)
        if lease == id then
          held, tail_at = true, nxt == NONE and at
        else
          n = n + 1
          ids[n], exp[n] = lease, e
        end
      end
      seen, prev, previous, cur = seen + 1, cur, e, nxt
    end
    if seen ~= held_n or prev ~= last then
      return nil
    end
    in_place = n + 1 == seen and tail_at
  end
  if release then
    if not held then
      return 0
    end
    if n == 0 then
      if pcall_redis("DEL", key) ~= 1 then
        return nil
      end
    elseif not cc_store(key, n) then
      return nil
    end
    return 1
  end
  local limit = p[1]
  if not held and n >= limit then
    -- The wait until the soonest of them frees a slot, in ms rounded up (M.cdiv, inline).
    local wait = exp[n - limit + 1] - now
    local ms = 0
    if wait > 0 then
      ms = wait / 1000
      ms = ms - ms % 1
      ms = ms * 1000 < wait and ms + 1 or ms
    end
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 0, limit, 0, ms, 0
    return REPLY
  end
  local expires = now + p[2]
  if in_place and (n == 0 or exp[n] <= expires) then
    -- The id's lease stays the newest and the table keeps every record: the table the
    -- general path would build differs from this one only in that lease's expiry (when
    -- the module left the table with other slots or tombstones, those stay, as the
    -- module's own update in place leaves them).
    -- Two small writes: on Redis 7.0 they cost less than a new value built in Lua (see
    -- M.IN_PLACE), on Valkey 9.1 about the same.
    local at = in_place + 5
    local pxat = expires / 1000
    pxat = pxat - pxat % 1
    pxat = (pxat * 1000 < expires and pxat + 1 or pxat) + M.TTL_SLACK_MS
    if M.FAST_TEXT then
      at, pxat = OFFSETS[at] or offset_text(at), fmt("%d", pxat)
    end
    if pcall_redis("SETRANGE", key, at, spack("<I8", expires)) ~= len or pcall_redis("PEXPIREAT", key, pxat) ~= 1 then
      return nil
    end
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 1, limit, limit > n + 1 and limit - n - 1 or 0, 0, 0
    return REPLY
  end
  -- `id` after the leases expiring no later than it.
  local k = n + 1
  while k > 1 and exp[k - 1] > expires do
    ids[k], exp[k] = ids[k - 1], exp[k - 1]
    k = k - 1
  end
  ids[k], exp[k] = id, expires
  if not cc_store(key, n + 1) then
    return nil
  end
  REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 1, limit, limit > n + 1 and limit - n - 1 or 0, 0, 0
  return REPLY
end
