#!lua
-- redis-rl's Lua twin: the module's commands as one script, for servers that cannot load
-- modules (managed Redis and Valkey). Same replies, same error texts, same stored bytes as
-- the module, so a key written here is read and continued by the module and the other way
-- round. See README.md, "Without the module".
--
-- Call it as the command would be called, with the command name moved after the keys:
--
--   RL.TOKENBUCKET key 10 10 1000 COST 2   ->  EVALSHA <sha> 1 key RL.TOKENBUCKET 10 10 1000 COST 2
--   RL.ALL 2 k1 k2 SLIDING 10 1000 FIXED 5 1000  ->  EVALSHA <sha> 2 k1 k2 RL.ALL SLIDING 10 1000 FIXED 5 1000
--
-- Commands: RL.TOKENBUCKET, RL.SLIDING, RL.FIXED, RL.GCRA, RL.LOG, RL.ALL, RL.REFUND.
--
-- Time is the server's (TIME, in microseconds); writes replicate as their effects
-- (`SET key value PXAT ms`, the default from Redis 7.0); a denied call, a PEEK and a COST 0
-- write nothing.
--
-- Exactness: Lua numbers are doubles, exact for integers below 2^53. Every quantity that
-- can exceed that (a token bucket's level, a GCRA arrival time: up to 2^128) is a bignum
-- of 24-bit limbs below, with exact integer division. Every parameter range of the module
-- is accepted. What the twin cannot represent, it refuses instead of rounding:
-- * a reply field above 2^53 - 1 ms (a token bucket whose capacity x refill_ms /
--   refill_tokens, or a GCRA whose burst x period_ms / limit, is over 2^53 - 1 ms,
--   about 285,000 years): `ERR ... beyond the exact range of the Lua twin ...`, nothing
--   written, before any key is read;
-- * a stored instant after 2^52 us (year 2112) reads as a corrupt limiter.

local TTL_SLACK_MS = 1000 -- the module's rl.ttl-slack-ms default
local MAX_COUNT = 1000000000000000 -- 10^15
local MAX_DURATION_MS = 1000000000000 -- 10^12
local MAX_LOG = 10000 -- rl.max-log-entries default (and ceiling)
local MAX_ALL_KEYS = 16 -- rl.max-all-keys default
local EXACT = 9007199254740991 -- 2^53 - 1: the largest reply field the twin sends
local LATEST_US = 4503599627370496 -- 2^52: the latest stored instant the twin reads

local floor = math.floor
local byte, char, fmt = string.byte, string.char, string.format

-- Exact integer division of numbers below 2^53 (Lua's / rounds; this corrects it).
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

local function imod(a, b)
  return a - idiv(a, b) * b
end

local function ceil_div(a, b)
  local q = idiv(a, b)
  if q * b < a then
    return q + 1
  end
  return q
end

-- ---------------------------------------------------------------------------------------
-- Bignums: arrays of 24-bit limbs, least significant first, no trailing zero limbs.
-- Limb products stay below 2^48, so every step is exact in doubles.
local LIMB = 16777216 -- 2^24

local function bn(n)
  local a = {}
  local i = 0
  while n > 0 do
    i = i + 1
    local q = floor(n / LIMB)
    a[i] = n - q * LIMB
    n = q
  end
  return a
end

local U64_MAX = { 16777215, 16777215, 65535 }
local U128_MAX = { 16777215, 16777215, 16777215, 16777215, 16777215, 255 }

local function trim(a)
  local n = #a
  while n > 0 and a[n] == 0 do
    a[n] = nil
    n = n - 1
  end
  return a
end

local function bcmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then
      return a[i] < b[i] and -1 or 1
    end
  end
  return 0
end

local function bmax(a, b)
  return bcmp(a, b) >= 0 and a or b
end

local function bmin(a, b)
  return bcmp(a, b) <= 0 and a or b
end

local function badd(a, b)
  local r, carry = {}, 0
  local n = #a > #b and #a or #b
  for i = 1, n do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= LIMB then
      r[i] = s - LIMB
      carry = 1
    else
      r[i] = s
      carry = 0
    end
  end
  if carry > 0 then
    r[n + 1] = carry
  end
  return r
end

-- a - b, or 0 when b > a.
local function bsub(a, b)
  if bcmp(a, b) <= 0 then
    return {}
  end
  local r, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i] = s + LIMB
      borrow = 1
    else
      r[i] = s
      borrow = 0
    end
  end
  return trim(r)
end

local function bmul(a, b)
  if #a == 0 or #b == 0 then
    return {}
  end
  local r = {}
  for k = 1, #a + #b do
    r[k] = 0
  end
  for i = 1, #a do
    local ai, carry = a[i], 0
    for j = 1, #b do
      local k = i + j - 1
      local t = r[k] + ai * b[j] + carry
      carry = floor(t / LIMB)
      r[k] = t - carry * LIMB
    end
    local k = i + #b
    while carry > 0 do
      local t = r[k] + carry
      carry = floor(t / LIMB)
      r[k] = t - carry * LIMB
      k = k + 1
    end
  end
  return trim(r)
end

-- Saturating at u128::MAX, as the module's u128 arithmetic does.
local function bsat(a)
  return bmin(a, U128_MAX)
end

-- Pieces a limb is cut into for a divisor of a given size: remainder x piece < 2^53.
local PIECE_BITS = { 24, 12, 8, 6, 4, 3 }

-- Quotient (bignum) and remainder (number) of a / d for a number 1 <= d <= 2^50.
local function bdivmod(a, d)
  local s = 24
  for _, bits in ipairs(PIECE_BITS) do
    s = bits
    if d * 2 ^ bits <= 9007199254740992 then
      break
    end
  end
  local piece, per = 2 ^ s, 24 / s
  local q, r = {}, 0
  for i = #a, 1, -1 do
    local limb, ql = a[i], 0
    for k = per - 1, 0, -1 do
      local scale = piece ^ k
      local p = floor(limb / scale)
      limb = limb - p * scale
      local x = r * piece + p
      local qd = floor(x / d)
      local rest = x - qd * d
      if rest < 0 then
        qd = qd - 1
        rest = rest + d
      elseif rest >= d then
        qd = qd + 1
        rest = rest - d
      end
      r = rest
      ql = ql * piece + qd
    end
    q[i] = ql
  end
  return trim(q), r
end

local function bdiv(a, d)
  local q = bdivmod(a, d)
  return q
end

local function bdivceil(a, d)
  local q, r = bdivmod(a, d)
  if r > 0 then
    q = badd(q, { 1 })
  end
  return q
end

-- The value as a number; math.huge when it is not exact (2^53 or more).
local function bnum(a)
  if #a > 3 or (#a == 3 and a[3] >= 32) then
    return math.huge
  end
  return (a[1] or 0) + (a[2] or 0) * LIMB + (a[3] or 0) * LIMB * LIMB
end

-- u128 -> ceil(us / 1000) as a number (math.huge beyond 2^53: see `exact`).
local function ceil_millis(us)
  return bnum(bdivceil(us, 1000))
end

-- ---------------------------------------------------------------------------------------
-- Errors, texts as the module's.

-- Errors travel as strings with a mark (Redis 7.0 turns an error object into its text), so
-- the top level tells ours (and the server's) from a bug.
local MARK = "\1rl\1"

local function fail(text)
  error(MARK .. text, 0)
end

local function shown(s)
  local out = {}
  local n = #s > 40 and 40 or #s
  for i = 1, n do
    local b = byte(s, i)
    if b >= 32 and b <= 126 then
      out[#out + 1] = char(b)
    else
      out[#out + 1] = fmt("\\x%02x", b)
    end
  end
  if #s > 40 then
    out[#out + 1] = "..."
  end
  return table.concat(out)
end

local function num(n)
  return fmt("%.0f", n)
end

local function range_text(name, min, max)
  return name .. " must be an integer between " .. num(min) .. " and " .. num(max)
end

local function param_error(name, min, max)
  fail("ERR " .. range_text(name, min, max))
end

-- A plain decimal integer in [min, max] (the module's `integer`).
local function integer(s, name, min, max)
  if s == nil or not s:find("^%d+$") then
    param_error(name, min, max)
  end
  local digits = s:gsub("^0+", "")
  if #digits > 16 then
    param_error(name, min, max)
  end
  local n = tonumber(digits) or 0
  if n < min or n > max then
    param_error(name, min, max)
  end
  return n
end

local function count(s, name)
  return integer(s, name, 1, MAX_COUNT)
end

local function duration(s, name)
  return integer(s, name, 1, MAX_DURATION_MS)
end

-- `[BURST b] [COST n] [PEEK]` from args[i..]: cost, peek, burst (nil when not given).
local function options(args, i, with_burst)
  local expected = with_burst and "BURST b, COST n or PEEK" or "COST n or PEEK"
  local cost, peek, burst
  while i <= #args do
    local name = args[i]:upper()
    if with_burst and name == "BURST" then
      if burst then
        fail("ERR option BURST given more than once")
      end
      if args[i + 1] == nil then
        fail("ERR option BURST needs a value: " .. range_text("burst", 1, MAX_COUNT))
      end
      burst = count(args[i + 1], "burst")
      i = i + 2
    elseif name == "COST" then
      if cost then
        fail("ERR option COST given more than once")
      end
      if args[i + 1] == nil then
        fail("ERR option COST needs a value: " .. range_text("cost", 0, MAX_COUNT))
      end
      cost = integer(args[i + 1], "cost", 0, MAX_COUNT)
      i = i + 2
    elseif name == "PEEK" then
      if peek then
        fail("ERR option PEEK given more than once")
      end
      peek = true
      i = i + 1
    else
      fail("ERR unknown option '" .. shown(args[i]) .. "', expected " .. expected)
    end
  end
  return cost or 1, peek or false, burst
end

-- Refuses parameters whose waits could exceed what a double holds exactly.
local function exact_wait(a, b, c, what)
  if bnum(bdiv(bmul(bn(a), bn(b)), c)) > EXACT - 2 * MAX_DURATION_MS then
    fail("ERR " .. what .. " is over 2^53 ms, beyond the exact range of the Lua twin: use the module for these parameters")
  end
end

-- ---------------------------------------------------------------------------------------
-- Stored bytes: magic "\0RL", version 1, tag, little-endian fields (src/encoding).

local NAMES = {
  T = "token bucket",
  S = "sliding window",
  F = "fixed window",
  G = "GCRA",
  L = "sliding window log",
  C = "concurrency",
}

local function u64_bytes(n)
  local b = {}
  for i = 1, 8 do
    local q = floor(n / 256)
    b[i] = n - q * 256
    n = q
  end
  return char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
end

local function u128_bytes(a)
  local b = {}
  for i = 1, 6 do
    local limb = a[i] or 0
    local lo = limb % 256
    local mid = floor(limb / 256) % 256
    b[#b + 1] = lo
    b[#b + 1] = mid
    b[#b + 1] = floor(limb / 65536)
  end
  return char(unpack(b, 1, 16))
end

-- A u64 field at offset `at` (1-based); nil when 2^53 or more.
local function read_u64(s, at)
  local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, at, at + 7)
  if b8 ~= 0 or b7 >= 32 then
    return nil
  end
  return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
    + (b5 + b6 * 256 + b7 * 65536) * 4294967296
end

local function read_u128(s, at)
  local a = {}
  for i = 0, 5 do
    local b1, b2, b3 = byte(s, at + 3 * i, at + 3 * i + 2)
    if i == 5 then
      b2, b3 = 0, 0
    end
    a[i + 1] = b1 + b2 * 256 + b3 * 65536
  end
  return trim(a)
end

local function header(tag)
  return "\0RL\1" .. tag
end

local function corrupt(tag)
  fail("ERR key holds a corrupt redis-rl " .. NAMES[tag] .. " limiter")
end

-- The longest value a valid limiter of each kind has (src/encoding: `MAX_BODY_LEN`); a longer
-- one is corrupt and is never read whole.
local MAX_LEN = { T = 37, S = 37, F = 29, G = 37, L = 5 + 6 + 12 * MAX_LOG }

-- The key's value if it holds a limiter of `tag` (nil when missing), else the module's error.
local function read_value(key, tag)
  local v = redis.pcall("GETRANGE", key, 0, MAX_LEN[tag])
  if type(v) == "table" and v.err then
    fail(v.err)
  end
  if v == "" then
    if redis.call("EXISTS", key) == 0 then
      return nil
    end
    fail("ERR key holds a value that is not a redis-rl limiter")
  end
  if #v < 5 or v:sub(1, 3) ~= "\0RL" then
    fail("ERR key holds a value that is not a redis-rl limiter")
  end
  local version = byte(v, 4)
  if version ~= 1 then
    fail("ERR key holds a redis-rl limiter in format version " .. version .. ", this module reads version 1")
  end
  local stored = v:sub(5, 5)
  if not NAMES[stored] then
    fail("ERR key holds a redis-rl limiter of a kind this module does not know (tag " .. byte(v, 5) .. ")")
  end
  if stored ~= tag then
    fail("ERR key holds a " .. NAMES[stored] .. " limiter, not a " .. NAMES[tag] .. " limiter")
  end
  if #v > MAX_LEN[tag] then
    corrupt(tag)
  end
  return v
end

local function valid_duration(n)
  return n and n >= 1 and n <= MAX_DURATION_MS
end

-- Fixed-size states: the fields, or the module's "corrupt" error.
local function read_fixed(key, tag, len)
  local v = read_value(key, tag)
  if v and #v ~= len then
    corrupt(tag)
  end
  return v
end

local function write(key, value, now, reset_after)
  local at = ceil_div(now, 1000) + reset_after + TTL_SLACK_MS
  local r = redis.pcall("SET", key, value, "PXAT", num(at))
  if type(r) == "table" and r.err then
    fail(r.err)
  end
end

-- A decision: allowed (true/false), limit, remaining, retry ("never" = -1), reset_after.
local function decision(allowed, limit, remaining, retry, reset_after)
  return { allowed = allowed, limit = limit, remaining = remaining, retry = retry, reset = reset_after }
end

-- ---------------------------------------------------------------------------------------
-- Token bucket (core/src/token_bucket.rs): level in units of 1/(refill_ms x 1000) token.

local TB = { tag = "T" }

function TB.parse(args, i)
  local p = {}
  p.capacity = count(args[i], "capacity")
  p.rate = count(args[i + 1], "refill_tokens")
  p.refill_ms = duration(args[i + 2], "refill_ms")
  exact_wait(p.capacity, p.refill_ms, p.rate, "capacity x refill_ms / refill_tokens")
  p.unit = p.refill_ms * 1000
  p.full = bmul(bn(p.capacity), bn(p.unit))
  return p, i + 3
end

function TB.read(key)
  local v = read_fixed(key, "T", 37)
  if not v then
    return nil
  end
  local s = { updated_at = read_u64(v, 6), refill_ms = read_u64(v, 14), level = read_u128(v, 22) }
  if not s.updated_at or s.updated_at > LATEST_US or not valid_duration(s.refill_ms) then
    corrupt("T")
  end
  if bcmp(s.level, bmul(bn(MAX_COUNT), bn(s.refill_ms * 1000))) > 0 then
    corrupt("T")
  end
  return s
end

function TB.encode(s)
  return header("T") .. u64_bytes(s.updated_at) .. u64_bytes(s.refill_ms) .. u128_bytes(s.level)
end

local function tb_level_at(s, now, p)
  if not s then
    return p.full, now
  end
  local level = s.level
  if s.refill_ms ~= p.refill_ms then
    local old_unit = s.refill_ms * 1000
    level = bmin(level, bmul(bn(MAX_COUNT), bn(old_unit)))
    local q, r = bdivmod(level, old_unit)
    level = badd(bmul(q, bn(p.unit)), bdiv(bmul(bn(r), bn(p.unit)), old_unit))
  end
  local as_of = now > s.updated_at and now or s.updated_at
  local refilled = badd(level, bmul(bn(p.rate), bn(as_of - s.updated_at)))
  return bmin(refilled, p.full), as_of
end

function TB.check(s, now, p, cost)
  local level, as_of = tb_level_at(s, now, p)
  local lag = as_of - now
  local function wait_to_reach(target, from)
    return ceil_millis(badd(bdivceil(bsub(target, from), p.rate), bn(lag)))
  end
  local function decide(allowed, retry, after)
    return decision(allowed, p.capacity, bnum(bdiv(after, p.unit)), retry, wait_to_reach(p.full, after))
  end
  if cost > p.capacity then
    return decide(false, -1, level)
  end
  local need = bmul(bn(cost), bn(p.unit))
  if bcmp(level, need) < 0 then
    return decide(false, wait_to_reach(need, level), level)
  end
  local after = bsub(level, need)
  local new
  if cost > 0 then
    new = { level = after, updated_at = as_of, refill_ms = p.refill_ms }
  end
  return decide(true, 0, after), new
end

function TB.refund(s, now, p, amount)
  local level, as_of = tb_level_at(s, now, p)
  local refunded = bnum(bdivceil(bsub(p.full, level), p.unit))
  if refunded > amount then
    refunded = amount
  end
  if refunded == 0 then
    return 0
  end
  local new_level = bmin(badd(level, bmul(bn(refunded), bn(p.unit))), p.full)
  return refunded, { level = new_level, updated_at = as_of, refill_ms = p.refill_ms }
end

-- ---------------------------------------------------------------------------------------
-- Sliding window counter (core/src/sliding_window.rs).

local SW = { tag = "S" }

local function window_params(args, i)
  local p = {}
  p.limit = count(args[i], "limit")
  p.window_ms = duration(args[i + 1], "window_ms")
  p.window = p.window_ms * 1000
  return p, i + 2
end

SW.parse = window_params

function SW.read(key)
  local v = read_fixed(key, "S", 37)
  if not v then
    return nil
  end
  local s = { window_ms = read_u64(v, 6), window_start = read_u64(v, 14), previous = read_u64(v, 22), current = read_u64(v, 30) }
  if not valid_duration(s.window_ms) or not s.window_start or s.window_start * 1000 > LATEST_US then
    corrupt("S")
  end
  if imod(s.window_start, s.window_ms) ~= 0 or not s.previous or s.previous > MAX_COUNT
    or not s.current or s.current > MAX_COUNT then
    corrupt("S")
  end
  return s
end

function SW.encode(s)
  return header("S") .. u64_bytes(s.window_ms) .. u64_bytes(s.window_start) .. u64_bytes(s.previous)
    .. u64_bytes(s.current)
end

local function sw_view(s, now, p)
  local window = p.window
  if not s then
    return { start = now - imod(now, window), at = now, previous = 0, current = 0 }
  end
  local stored_start = s.window_start * 1000
  local at = now > stored_start and now or stored_start
  if s.window_ms ~= p.window_ms then
    local old = s.window_ms * 1000
    local old_start = at - imod(at, old)
    local d = old_start - stored_start
    local previous, current = 0, 0
    if d == 0 then
      previous, current = s.previous, s.current
    elseif d == old then
      previous = s.current
    end
    local elapsed = at - old_start
    local estimate = bdivceil(badd(bmul(bn(previous), bn(old - elapsed)), bmul(bn(current), bn(old))), old)
    return { start = at - imod(at, window), at = at, previous = 0, current = bnum(estimate) }
  end
  local start = at - imod(at, window)
  local d = start - stored_start
  local previous, current = 0, 0
  if d == 0 then
    previous, current = s.previous, s.current
  elseif d == window then
    previous = s.current
  end
  return { start = start, at = at, previous = previous, current = current }
end

local function sw_earliest_allowed(v, cost, p)
  local window, limit = p.window, p.limit
  if v.previous > 0 then
    local spare = limit - (v.current + cost)
    if spare >= 0 then
      local part = bnum(bdiv(bmul(bn(spare), bn(window)), v.previous))
      local decay_needed = window - (part < window and part or window)
      if decay_needed < window then
        local at = v.start + decay_needed
        return at > v.at and at or v.at
      end
    end
  end
  local next_start = v.start + window
  local decay_needed = 0
  if v.current > 0 then
    local part = bnum(bdiv(bmul(bn(limit - cost), bn(window)), v.current))
    decay_needed = window - (part < window and part or window)
  end
  return next_start + decay_needed
end

function SW.check(s, now, p, cost)
  local v = sw_view(s, now, p)
  local window = p.window
  local budget = bmul(bn(p.limit), bn(window))
  local used = badd(bmul(bn(v.previous), bn(window - (v.at - v.start))), bmul(bn(v.current), bn(window)))
  local function since_now(instant)
    return instant > now and ceil_div(instant - now, 1000) or 0
  end
  local function decide(allowed, retry, used_after, current)
    local idle = 0
    if current > 0 then
      idle = v.start + 2 * window
    elseif v.previous > 0 then
      idle = v.start + window
    end
    return decision(allowed, p.limit, bnum(bdiv(bsub(budget, used_after), window)), retry, since_now(idle))
  end
  if cost > p.limit then
    return decide(false, -1, used, v.current)
  end
  local after = badd(used, bmul(bn(cost), bn(window)))
  if bcmp(after, budget) > 0 then
    local retry = since_now(sw_earliest_allowed(v, cost, p))
    return decide(false, retry > 1 and retry or 1, used, v.current)
  end
  local current = v.current + cost
  local new
  if cost > 0 then
    new = { window_ms = p.window_ms, window_start = ceil_div(v.start, 1000), previous = v.previous, current = current }
  end
  return decide(true, 0, after, current), new
end

function SW.refund(s, now, p, amount)
  if not s then
    return 0
  end
  local v = sw_view(s, now, p)
  local refunded = v.current < amount and v.current or amount
  if refunded == 0 or s.window_ms ~= p.window_ms then
    return 0
  end
  return refunded, {
    window_ms = p.window_ms,
    window_start = ceil_div(v.start, 1000),
    previous = v.previous,
    current = v.current - refunded,
  }
end

-- ---------------------------------------------------------------------------------------
-- Fixed window counter (core/src/fixed_window.rs).

local FW = { tag = "F" }

FW.parse = window_params

function FW.read(key)
  local v = read_fixed(key, "F", 29)
  if not v then
    return nil
  end
  local s = { window_ms = read_u64(v, 6), window_start = read_u64(v, 14), count = read_u64(v, 22) }
  if not valid_duration(s.window_ms) or not s.window_start or s.window_start * 1000 > LATEST_US
    or imod(s.window_start, s.window_ms) ~= 0 or not s.count or s.count > MAX_COUNT then
    corrupt("F")
  end
  return s
end

function FW.encode(s)
  return header("F") .. u64_bytes(s.window_ms) .. u64_bytes(s.window_start) .. u64_bytes(s.count)
end

local function fw_current(s, now, window_ms)
  local now_ms = idiv(now, 1000)
  if not s then
    return now_ms - imod(now_ms, window_ms), 0
  end
  local at = now_ms > s.window_start and now_ms or s.window_start
  local n = at < s.window_start + s.window_ms and s.count or 0
  return at - imod(at, window_ms), n
end

function FW.check(s, now, p, cost)
  local start, n = fw_current(s, now, p.window_ms)
  local end_us = (start + p.window_ms) * 1000
  local until_end = end_us > now and ceil_div(end_us - now, 1000) or 0
  local function decide(allowed, retry, after)
    local remaining = p.limit > after and p.limit - after or 0
    return decision(allowed, p.limit, remaining, retry, after > 0 and until_end or 0)
  end
  if cost > p.limit then
    return decide(false, -1, n)
  end
  local after = n + cost
  if after > p.limit then
    return decide(false, until_end, n)
  end
  local new
  if cost > 0 then
    new = { window_ms = p.window_ms, window_start = start, count = after }
  end
  return decide(true, 0, after), new
end

function FW.refund(s, now, p, amount)
  if not s then
    return 0
  end
  local start, n = fw_current(s, now, p.window_ms)
  local refunded = n < amount and n or amount
  if refunded == 0 or s.window_ms ~= p.window_ms then
    return 0
  end
  return refunded, { window_ms = p.window_ms, window_start = start, count = n - refunded }
end

-- ---------------------------------------------------------------------------------------
-- GCRA (core/src/gcra.rs): the arrival time in ticks of 1/limit us.

local GC = { tag = "G" }

local function gcra_params(limit, period_ms, burst)
  local p = { limit = limit, period_ms = period_ms, burst = burst or limit }
  exact_wait(p.burst, p.period_ms, p.limit, "burst x period_ms / limit")
  p.interval = period_ms * 1000
  return p
end

function GC.parse(args, i)
  local limit = count(args[i], "limit")
  local period_ms = duration(args[i + 1], "period_ms")
  i = i + 2
  local burst
  if args[i] and args[i]:upper() == "BURST" then
    if args[i + 1] == nil then
      fail("ERR option BURST needs a value: " .. range_text("burst", 1, MAX_COUNT))
    end
    burst = count(args[i + 1], "burst")
    i = i + 2
  end
  return gcra_params(limit, period_ms, burst), i
end

function GC.read(key)
  local v = read_fixed(key, "G", 37)
  if not v then
    return nil
  end
  local s = { tat = read_u128(v, 6), limit = read_u64(v, 22), period_ms = read_u64(v, 30) }
  if not valid_duration(s.period_ms) or not s.limit or s.limit < 1 or s.limit > MAX_COUNT then
    corrupt("G")
  end
  local latest = badd(U64_MAX, bmul(bn(MAX_COUNT), bn(MAX_COUNT)))
  if bcmp(bdiv(s.tat, s.limit), latest) > 0 then
    corrupt("G")
  end
  return s
end

function GC.encode(s)
  return header("G") .. u128_bytes(s.tat) .. u64_bytes(s.limit) .. u64_bytes(s.period_ms)
end

local function gcra_tat_in(s, limit)
  if s.limit == limit then
    return s.tat
  end
  local q, r = bdivmod(s.tat, s.limit)
  return bsat(badd(bsat(bmul(q, bn(limit))), bdivceil(bmul(bn(r), bn(limit)), s.limit)))
end

function GC.check(s, now, p, cost)
  local now_t = bmul(bn(now), bn(p.limit))
  local tat = bmax(s and gcra_tat_in(s, p.limit) or {}, now_t)
  local horizon = badd(now_t, bmul(bn(p.burst), bn(p.interval)))
  local function to_millis(ticks)
    return ceil_millis(bdivceil(ticks, p.limit))
  end
  local function decide(allowed, retry, t)
    return decision(allowed, p.burst, bnum(bdiv(bsub(horizon, t), p.interval)), retry, to_millis(bsub(t, now_t)))
  end
  if cost > p.burst then
    return decide(false, -1, tat)
  end
  local after = bsat(badd(tat, bmul(bn(cost), bn(p.interval))))
  if bcmp(after, horizon) > 0 then
    return decide(false, to_millis(bsub(after, horizon)), tat)
  end
  local new
  if cost > 0 then
    new = { tat = after, limit = p.limit, period_ms = p.period_ms }
  end
  return decide(true, 0, after), new
end

function GC.refund(s, now, p, amount)
  local now_t = bmul(bn(now), bn(p.limit))
  local tat = s and gcra_tat_in(s, p.limit) or {}
  local refunded = bnum(bdivceil(bsub(tat, now_t), p.interval))
  if refunded > amount then
    refunded = amount
  end
  if refunded == 0 then
    return 0
  end
  local new_tat = bmax(bsub(tat, bmul(bn(refunded), bn(p.interval))), now_t)
  return refunded, { tat = new_tat, limit = p.limit, period_ms = p.period_ms }
end

-- ---------------------------------------------------------------------------------------
-- Sliding window log (core/src/sliding_log.rs): varint-encoded entries, oldest first.

local LG = { tag = "L" }

function LG.parse(args, i)
  local p = {}
  p.limit = integer(args[i], "limit", 1, MAX_LOG)
  p.window_ms = duration(args[i + 1], "window_ms")
  p.window = p.window_ms * 1000
  return p, i + 2
end

-- A varint at `pos`: value, next position; nil when malformed or 2^53 or more.
local function read_varint(v, pos)
  local value, scale = 0, 1
  for k = 0, 7 do
    local b = byte(v, pos + k)
    if not b then
      return nil
    end
    if b < 128 then
      if b == 0 and k > 0 then
        return nil
      end
      value = value + b * scale
      if value > EXACT then
        return nil
      end
      return value, pos + k + 1
    end
    value = value + (b - 128) * scale
    scale = scale * 128
  end
  return nil
end

local function varint(out, v)
  while v >= 128 do
    local q = floor(v / 128)
    out[#out + 1] = v - q * 128 + 128
    v = q
  end
  out[#out + 1] = v
end

function LG.read(key)
  local v = read_value(key, "L")
  if not v then
    return nil
  end
  local window_ms, pos = read_varint(v, 6)
  if not valid_duration(window_ms) then
    corrupt("L")
  end
  local at, total, times, counts = 0, 0, {}, {}
  while pos <= #v do
    local word, n
    word, pos = read_varint(v, pos)
    if not word then
      corrupt("L")
    end
    n = 1
    if word % 2 == 1 then
      n, pos = read_varint(v, pos)
      if not n or n < 2 then
        corrupt("L")
      end
    end
    at = at + floor(word / 2)
    total = total + n
    if at > LATEST_US or total > MAX_LOG then
      corrupt("L")
    end
    times[#times + 1] = at
    counts[#counts + 1] = n
  end
  return { window_ms = window_ms, times = times, counts = counts }
end

function LG.encode(s)
  local out = {}
  varint(out, s.window_ms)
  local previous = 0
  for i = 1, #s.times do
    local delta = s.times[i] - previous
    previous = s.times[i]
    if s.counts[i] == 1 then
      varint(out, delta * 2)
    else
      varint(out, delta * 2 + 1)
      varint(out, s.counts[i])
    end
  end
  local parts = { header("L") }
  for i = 1, #out, 4096 do
    parts[#parts + 1] = char(unpack(out, i, math.min(i + 4095, #out)))
  end
  return table.concat(parts)
end

function LG.check(s, now, p, cost)
  local times = s and s.times or {}
  local counts = s and s.counts or {}
  local window, limit = p.window, p.limit
  local n = #times
  local at = now
  if n > 0 and times[n] > now then
    at = times[n]
  end
  local first_live = n + 1
  for i = 1, n do
    if times[i] + window > at then
      first_live = i
      break
    end
  end
  local used = 0
  for i = first_live, n do
    used = used + counts[i]
  end
  local function since_now(instant)
    return instant > now and ceil_div(instant - now, 1000) or 0
  end
  local newest = first_live <= n and times[n] or nil
  local function decide(allowed, retry, u, last)
    return decision(allowed, limit, limit > u and limit - u or 0, retry, last and since_now(last + window) or 0)
  end
  if cost > limit then
    return decide(false, -1, used, newest)
  end
  local excess = used + cost - limit
  if excess > 0 then
    local freed, retry_at = 0, nil
    for i = first_live, n do
      freed = freed + counts[i]
      if freed >= excess then
        retry_at = times[i] + window
        break
      end
    end
    if not retry_at then
      retry_at = newest and newest + window or at
    end
    return decide(false, since_now(retry_at), used, newest)
  end
  if cost == 0 then
    return decide(true, 0, used, newest)
  end
  local new_times, new_counts = {}, {}
  for i = first_live, n do
    new_times[#new_times + 1] = times[i]
    new_counts[#new_counts + 1] = counts[i]
  end
  local m = #new_times
  if m > 0 and new_times[m] == at then
    new_counts[m] = new_counts[m] + cost
  else
    new_times[m + 1] = at
    new_counts[m + 1] = cost
  end
  return decide(true, 0, used + cost, at), { window_ms = p.window_ms, times = new_times, counts = new_counts }
end

function LG.refund(s, now, p, amount)
  if not s then
    return 0
  end
  local times, counts, window = s.times, s.counts, p.window
  local n = #times
  local at = now
  if n > 0 and times[n] > now then
    at = times[n]
  end
  local live_t, live_c = {}, {}
  for i = 1, n do
    if times[i] + window > at then
      live_t[#live_t + 1] = times[i]
      live_c[#live_c + 1] = counts[i]
    end
  end
  local refunded = 0
  while refunded < amount and #live_t > 0 do
    local m = #live_t
    local take = live_c[m] < amount - refunded and live_c[m] or amount - refunded
    live_c[m] = live_c[m] - take
    refunded = refunded + take
    if live_c[m] == 0 then
      live_t[m] = nil
      live_c[m] = nil
    end
  end
  if refunded == 0 then
    return 0
  end
  return refunded, { window_ms = p.window_ms, times = live_t, counts = live_c }
end

-- ---------------------------------------------------------------------------------------
-- Commands.

local ALGORITHMS = "TOKENBUCKET, SLIDING, FIXED, GCRA or LOG"
local SPECS = { TOKENBUCKET = TB, SLIDING = SW, FIXED = FW, GCRA = GC, LOG = LG }
local SINGLE = {
  ["RL.TOKENBUCKET"] = TB,
  ["RL.SLIDING"] = SW,
  ["RL.FIXED"] = FW,
  ["RL.GCRA"] = GC,
  ["RL.LOG"] = LG,
}

local function now_us()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function check_exact(d)
  if d.remaining > EXACT or d.retry > EXACT or d.reset > EXACT then
    fail("ERR a reply value is beyond the exact range of the Lua twin (2^53): use the module for this key")
  end
  return d
end

local function reply(d)
  return { d.allowed and 1 or 0, d.limit, d.remaining, d.retry, d.reset }
end

local function arity(name)
  fail("ERR wrong number of arguments for '" .. name .. "' command")
end

-- A spec of RL.ALL or RL.REFUND at args[i]: algorithm, params, next index; errors as SpecError.
local function parse_spec(args, i, prefix)
  local ok, a, p, nxt = pcall(function()
    local name = args[i]
    if name == nil then
      fail("missing, expected " .. ALGORITHMS .. " and its parameters")
    end
    local algo = SPECS[name:upper()]
    if not algo then
      fail("unknown algorithm '" .. shown(name) .. "', expected " .. ALGORITHMS)
    end
    local params, after = algo.parse(args, i + 1)
    return algo, params, after
  end)
  if not ok then
    local text = tostring(a)
    if text:sub(1, #MARK) ~= MARK then
      error(a, 0)
    end
    text = text:sub(#MARK + 1):gsub("^ERR ", "")
    fail("ERR " .. prefix .. text)
  end
  return a, p, nxt
end

local function single(name, algo, args)
  if #KEYS ~= 1 or #args < (algo == TB and 4 or 3) then
    arity(name)
  end
  local p, i
  if algo == GC then
    local limit = count(args[2], "limit")
    local period_ms = duration(args[3], "period_ms")
    local cost, peek, burst = options(args, 4, true)
    return algo, gcra_params(limit, period_ms, burst), cost, peek
  end
  p, i = algo.parse(args, 2)
  local cost, peek = options(args, i, false)
  return algo, p, cost, peek
end

local function run_single(name, algo, args)
  local p, cost, peek
  algo, p, cost, peek = single(name, algo, args)
  local key = KEYS[1]
  local state = algo.read(key)
  local now = now_us()
  local d, new = algo.check(state, now, p, cost)
  check_exact(d)
  if new and not peek then
    write(key, algo.encode(new), now, d.reset)
  end
  return reply(d)
end

local function run_all(args)
  local n = #KEYS
  if n + #args < 3 then
    arity(args[1])
  end
  if n < 1 or n > MAX_ALL_KEYS then
    param_error("numkeys", 1, MAX_ALL_KEYS)
  end
  for i = 2, n do
    for j = 1, i - 1 do
      if KEYS[j] == KEYS[i] then
        fail("ERR key " .. i .. " repeats an earlier key: each key may appear once")
      end
    end
  end
  local specs, at = {}, 2
  for i = 1, n do
    local algo, p
    algo, p, at = parse_spec(args, at, "spec " .. i .. ": ")
    specs[i] = { algo = algo, p = p }
  end
  local cost, peek = options(args, at, false)
  local states = {}
  for i = 1, n do
    states[i] = specs[i].algo.read(KEYS[i])
  end
  local now = now_us()
  local decisions, writes, denied = {}, {}, 0
  for i = 1, n do
    decisions[i], writes[i] = specs[i].algo.check(states[i], now, specs[i].p, cost)
    check_exact(decisions[i])
    if denied == 0 and not decisions[i].allowed then
      denied = i
    end
  end
  if denied > 0 then
    for i = 1, n do
      if decisions[i].allowed then
        decisions[i] = check_exact(specs[i].algo.check(states[i], now, specs[i].p, 0))
      end
    end
  elseif not peek then
    for i = 1, n do
      if writes[i] then
        write(KEYS[i], specs[i].algo.encode(writes[i]), now, decisions[i].reset)
      end
    end
  end
  local per_key = {}
  for i = 1, n do
    local d = decisions[i]
    per_key[i] = { d.limit, d.remaining, d.retry, d.reset }
  end
  return { denied == 0 and 1 or 0, denied, per_key }
end

local function run_refund(args)
  if #KEYS ~= 1 or #args < 4 then
    arity(args[1])
  end
  local algo, p, i = parse_spec(args, 2, "spec: ")
  local rest = #args - i + 1
  local amount
  if rest == 0 then
    fail("ERR RL.REFUND needs COST n: the units to give back")
  elseif args[i]:upper() ~= "COST" then
    fail("ERR unknown option '" .. shown(args[i]) .. "', expected COST n")
  elseif rest == 1 then
    fail("ERR option COST needs a value: " .. range_text("cost", 0, MAX_COUNT))
  elseif rest > 2 then
    fail("ERR option COST given more than once")
  end
  amount = integer(args[i + 1], "cost", 0, MAX_COUNT)
  local key = KEYS[1]
  local state = algo.read(key)
  local now = now_us()
  local refunded, new = algo.refund(state, now, p, amount)
  local view = check_exact(algo.check(new or state, now, p, 0))
  if new then
    write(key, algo.encode(new), now, view.reset)
  end
  return { refunded, view.limit, view.remaining, 0, view.reset }
end

local function main(args)
  local name = args[1]
  if name == nil then
    fail("ERR the Lua twin needs the command name after the keys (RL.TOKENBUCKET, RL.ALL, ...)")
  end
  local upper = name:upper()
  local algo = SINGLE[upper]
  if algo then
    return run_single(name, algo, args)
  elseif upper == "RL.ALL" then
    return run_all(args)
  elseif upper == "RL.REFUND" then
    return run_refund(args)
  end
  fail("ERR unknown command '" .. shown(name) .. "' for the Lua twin")
end

local ok, result = pcall(main, ARGV)
if ok then
  return result
end
local text = tostring(type(result) == "table" and result.err or result)
if text:sub(1, #MARK) == MARK then
  return redis.error_reply(text:sub(#MARK + 1))
end
return redis.error_reply("ERR internal error in the redis-rl Lua twin (a bug: please report it): " .. text)
