#!lua name=redisrl
-- redis-rl's Lua twin: the module's commands as one script, for servers that cannot load
-- modules (managed Redis and Valkey). Same replies, same error texts, same stored bytes as
-- the module, so a key written here is read and continued by the module and the other way
-- round. See README.md, "Without the module".
--
-- A function library (Redis 7.0+, Valkey): load it once with `FUNCTION LOAD REPLACE`, then
-- call it as the command would be called, with the command name moved after the keys:
--
--   RL.TOKENBUCKET key 10 10 1000 COST 2   ->  FCALL rl 1 key RL.TOKENBUCKET 10 10 1000 COST 2
--   RL.ALL 2 k1 k2 SLIDING 10 1000 FIXED 5 1000  ->  FCALL rl 2 k1 k2 RL.ALL SLIDING 10 1000 FIXED 5 1000
--
-- Where FUNCTION is not allowed, the same file runs as a script: replace its first line with
-- `#!lua` and use `EVALSHA <sha> numkeys keys... RL.X args...` (slower: a script defines its
-- functions again on every call).
--
-- Commands: RL.TOKENBUCKET, RL.SLIDING, RL.FIXED, RL.GCRA, RL.LOG, RL.QUOTA, RL.ALL, RL.REFUND.
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


local function build()
  -- Everything lives in one table, built on the first call (FUNCTION LOAD runs the library
  -- without `math` or `string`) and kept: each function definition costs Redis's Lua about
  -- 0.3 us, which a script (EVALSHA) pays on every call and a library only once.
  local M = { LOAD = {} }
  M.TTL_SLACK_MS = 1000 -- the module's rl.ttl-slack-ms default
  M.MAX_COUNT = 1000000000000000 -- 10^15
  M.MAX_DURATION_MS = 1000000000000 -- 10^12
  M.MAX_LOG = 10000 -- rl.max-log-entries default (and ceiling)
  M.MAX_ALL_KEYS = 16 -- rl.max-all-keys default
  M.EXACT = 9007199254740991 -- 2^53 - 1: the largest reply field the twin sends
  M.LATEST_US = 4503599627370496 -- 2^52: the latest stored instant the twin reads

  local floor = math.floor
  local byte, char, fmt = string.byte, string.char, string.format

  -- Exact integer division of numbers below 2^53 (Lua's / rounds; this corrects it).
  function M.idiv(a, b)
    local q = floor(a / b)
    local r = a - q * b
    if r < 0 then
      q = q - 1
    elseif r >= b then
      q = q + 1
    end
    return q
  end

  function M.imod(a, b)
    return a - M.idiv(a, b) * b
  end

  function M.ceil_div(a, b)
    local q = M.idiv(a, b)
    if q * b < a then
      return q + 1
    end
    return q
  end

  -- ---------------------------------------------------------------------------------------
  -- Integers of up to 128 bits and more: a Lua number while the value is below 2^53 (exact, and
  -- fast), else an array of 24-bit limbs, least significant first, no trailing zero limbs
  -- (limb products stay below 2^48, so every step is exact in doubles). Every operation takes
  -- either form and returns a number whenever the result fits.
  M.LOAD.bignum = function()
    local LIMB = 16777216 -- 2^24
    local EXACT = M.EXACT

    local function limbs(n)
      if type(n) == "table" then
        return n
      end
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

    -- Trims leading zero limbs; a number when below 2^53.
    local function norm(a)
      local n = #a
      while n > 0 and a[n] == 0 do
        a[n] = nil
        n = n - 1
      end
      if n <= 2 or (n == 3 and a[3] < 32) then
        return (a[1] or 0) + (a[2] or 0) * LIMB + (a[3] or 0) * LIMB * LIMB
      end
      return a
    end

    function M.bn(n)
      return n
    end

    M.U64_MAX = { 16777215, 16777215, 65535 }
    M.U128_MAX = { 16777215, 16777215, 16777215, 16777215, 16777215, 255 }
    M.trim = norm

    local function cmp_limbs(a, b)
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

    function M.bcmp(a, b)
      local ta, tb = type(a) == "number", type(b) == "number"
      if ta and tb then
        return a < b and -1 or (a > b and 1 or 0)
      elseif ta then
        return -1 -- a number is below every (normalized) limb array
      elseif tb then
        return 1
      end
      return cmp_limbs(a, b)
    end

    function M.bmax(a, b)
      return M.bcmp(a, b) >= 0 and a or b
    end

    function M.bmin(a, b)
      return M.bcmp(a, b) <= 0 and a or b
    end

    function M.badd(a, b)
      if type(a) == "number" and type(b) == "number" then
        local sum = a + b
        if sum <= EXACT then
          return sum
        end
      end
      a, b = limbs(a), limbs(b)
      local r, carry = {}, 0
      local n = #a > #b and #a or #b
      for i = 1, n do
        local sum = (a[i] or 0) + (b[i] or 0) + carry
        if sum >= LIMB then
          r[i] = sum - LIMB
          carry = 1
        else
          r[i] = sum
          carry = 0
        end
      end
      if carry > 0 then
        r[n + 1] = carry
      end
      return norm(r)
    end

    -- a - b, or 0 when b > a.
    function M.bsub(a, b)
      if type(a) == "number" and type(b) == "number" then
        return a > b and a - b or 0
      end
      if M.bcmp(a, b) <= 0 then
        return 0
      end
      a, b = limbs(a), limbs(b)
      local r, borrow = {}, 0
      for i = 1, #a do
        local d = a[i] - (b[i] or 0) - borrow
        if d < 0 then
          r[i] = d + LIMB
          borrow = 1
        else
          r[i] = d
          borrow = 0
        end
      end
      return norm(r)
    end

    function M.bmul(a, b)
      if type(a) == "number" and type(b) == "number" then
        local product = a * b
        if product <= EXACT then
          return product
        end
      end
      a, b = limbs(a), limbs(b)
      if #a == 0 or #b == 0 then
        return 0
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
      return norm(r)
    end

    -- Saturating at u128::MAX, as the module's u128 arithmetic does.
    function M.bsat(a)
      return M.bmin(a, M.U128_MAX)
    end

    -- Pieces a limb is cut into for a divisor of a given size: remainder x piece < 2^53.
    local PIECE_BITS = { 24, 12, 8, 6, 4, 3 }

    -- Quotient and remainder (a number) of a / d for a number 1 <= d <= 2^50.
    function M.bdivmod(a, d)
      if type(a) == "number" then
        local q = M.idiv(a, d)
        return q, a - q * d
      end
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
      return norm(q), r
    end

    function M.bdiv(a, d)
      local q = M.bdivmod(a, d)
      return q
    end

    function M.bdivceil(a, d)
      local q, r = M.bdivmod(a, d)
      if r > 0 then
        q = M.badd(q, 1)
      end
      return q
    end

    -- The value as a number; math.huge when it is not exact (2^53 or more).
    function M.bnum(a)
      if type(a) == "number" then
        return a
      end
      return math.huge
    end

    -- 16 little-endian bytes.
    function M.u128_bytes(a)
      if type(a) == "number" then
        return M.u64_bytes(a) .. "\0\0\0\0\0\0\0\0"
      end
      local b = {}
      for i = 1, 6 do
        local limb = a[i] or 0
        b[#b + 1] = limb % 256
        b[#b + 1] = floor(limb / 256) % 256
        b[#b + 1] = floor(limb / 65536)
      end
      return char(unpack(b, 1, 16))
    end

    function M.read_u128(str, at)
      local low = M.read_u64(str, at)
      if low and str:sub(at + 8, at + 15) == "\0\0\0\0\0\0\0\0" then
        return low
      end
      local a = {}
      for i = 0, 5 do
        local b1, b2, b3 = byte(str, at + 3 * i, at + 3 * i + 2)
        if i == 5 then
          b2, b3 = 0, 0
        end
        a[i + 1] = b1 + b2 * 256 + b3 * 65536
      end
      return norm(a)
    end

    -- u128 -> ceil(us / 1000) as a number (math.huge beyond 2^53: see `exact`).
    function M.ceil_millis(us)
      return M.bnum(M.bdivceil(us, 1000))
    end
  end

  -- ---------------------------------------------------------------------------------------
  -- Errors, texts as the module's.

  -- Errors travel as strings with a mark (Redis 7.0 turns an error object into its text), so
  -- the top level tells ours (and the server's) from a bug.
  M.MARK = "\1rl\1"

  function M.fail(text)
    error(M.MARK .. text, 0)
  end

  function M.shown(s)
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

  function M.num(n)
    return fmt("%.0f", n)
  end

  function M.range_text(name, min, max)
    return name .. " must be an integer between " .. M.num(min) .. " and " .. M.num(max)
  end

  function M.param_error(name, min, max)
    M.fail("ERR " .. M.range_text(name, min, max))
  end

  -- A plain decimal integer in [min, max] (the module's `integer`).
  function M.integer(s, name, min, max)
    if s == nil or not s:find("^%d+$") then
      M.param_error(name, min, max)
    end
    local digits = s:gsub("^0+", "")
    if #digits > 16 then
      M.param_error(name, min, max)
    end
    local n = tonumber(digits) or 0
    if n < min or n > max then
      M.param_error(name, min, max)
    end
    return n
  end

  function M.count_param(s, name)
    return M.integer(s, name, 1, M.MAX_COUNT)
  end

  function M.duration_param(s, name)
    return M.integer(s, name, 1, M.MAX_DURATION_MS)
  end

  -- `[BURST b] [COST n] [UPTO] [PEEK]` from args[i..]: cost, peek, burst (nil when not
  -- given), upto. BURST and UPTO are options only where with_burst / with_upto say so.
  function M.options(args, i, with_burst, with_upto, opts)
    local own = ""
    for _, o in ipairs(opts or {}) do
      own = own .. o.token .. " " .. o.value .. ", "
    end
    local expected = own .. (with_burst and "BURST b, " or "") .. (with_upto and "COST n, UPTO, FORCE or PEEK" or "COST n, FORCE or PEEK")
    local cost, peek, burst, upto
    local given = {}
    while i <= #args do
      local name = args[i]:upper()
      local opt
      for _, o in ipairs(opts or {}) do
        if name == o.token then
          opt = o
        end
      end
      if opt then
        if given[opt.token] then
          M.fail("ERR option " .. opt.token .. " given more than once")
        end
        if args[i + 1] == nil then
          M.fail("ERR option " .. opt.token .. " needs a value: " .. opt.missing())
        end
        given[opt.token] = opt.parse(args[i + 1])
        i = i + 2
      elseif with_burst and name == "BURST" then
        if burst then
          M.fail("ERR option BURST given more than once")
        end
        if args[i + 1] == nil then
          M.fail("ERR option BURST needs a value: " .. M.range_text("burst", 1, M.MAX_COUNT))
        end
        burst = M.count_param(args[i + 1], "burst")
        i = i + 2
      elseif name == "COST" then
        if cost then
          M.fail("ERR option COST given more than once")
        end
        if args[i + 1] == nil then
          M.fail("ERR option COST needs a value: " .. M.range_text("cost", 0, M.MAX_COUNT))
        end
        cost = M.integer(args[i + 1], "cost", 0, M.MAX_COUNT)
        i = i + 2
      elseif name == "PEEK" then
        if peek then
          M.fail("ERR option PEEK given more than once")
        end
        peek = true
        i = i + 1
      elseif with_upto and name == "UPTO" then
        if upto then
          M.fail("ERR option UPTO given more than once")
        end
        upto = true
        i = i + 1
      elseif name == "FORCE" then
        -- Debts (a cost taken over the limit) are the module's alone: refused, not ignored.
        M.fail("ERR FORCE needs the redis-rl module: the Lua twin does not take a cost over the limit")
      else
        M.fail("ERR unknown option '" .. M.shown(args[i]) .. "', expected " .. expected)
      end
    end
    return cost or 1, peek or false, burst, upto or false, given
  end

  -- A partial grant (`UPTO`, core/src/algorithm.rs `upto`): min(cost, what a zero-cost check
  -- leaves) units; nothing available is the denial of one unit, writing nothing; cost 0 is
  -- the zero-cost check. Returns the decision, the new state (nil: write nothing), granted.
  function M.upto(algo, s, now, p, cost)
    local probe = algo.check(s, now, p, 0)
    if cost == 0 then
      return probe, nil, 0
    end
    local granted = cost < probe.remaining and cost or probe.remaining
    local d, new = algo.check(s, now, p, granted > 0 and granted or 1)
    if d.allowed and granted > 0 then
      return d, new, granted
    end
    return d, nil, 0
  end

  -- Refuses parameters whose waits could exceed what a double holds exactly.
  function M.exact_wait(a, b, c, what)
    if M.bnum(M.bdiv(M.bmul(M.bn(a), M.bn(b)), c)) > M.EXACT - 2 * M.MAX_DURATION_MS then
      M.fail("ERR " .. what .. " is over 2^53 ms, beyond the exact range of the Lua twin: use the module for these parameters")
    end
  end

  -- ---------------------------------------------------------------------------------------
  -- Stored bytes: magic "\0RL", version, tag, fields (src/encoding): version 1 has
  -- little-endian fixed-width fields (still read; written for a log), version 2 the fields of
  -- a fixed-size state as varints (written for T, S, F, G).

  M.NAMES = {
    T = "token bucket",
    S = "sliding window",
    F = "fixed window",
    G = "GCRA",
    Q = "calendar quota",
    L = "sliding window log",
    C = "concurrency",
  }

  function M.u64_bytes(n)
    local b = {}
    for i = 1, 8 do
      local q = floor(n / 256)
      b[i] = n - q * 256
      n = q
    end
    return char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
  end

  -- A u64 field at offset `at` (1-based); nil when 2^53 or more.
  function M.read_u64(s, at)
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, at, at + 7)
    if b8 ~= 0 or b7 >= 32 then
      return nil
    end
    return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
      + (b5 + b6 * 256 + b7 * 65536) * 4294967296
  end

  function M.header(tag)
    return "\0RL\1" .. tag
  end

  function M.corrupt(tag)
    M.fail("ERR key holds a corrupt redis-rl " .. M.NAMES[tag] .. " limiter")
  end

  -- The longest value a valid limiter of each kind has (src/encoding: `MAX_BODY_LEN`); a longer
  -- one is corrupt and is never read whole.
  M.MAX_LEN = { T = 5 + 39, S = 5 + 40, F = 5 + 30, G = 5 + 39, Q = 5 + 30, L = 5 + 6 + 12 * M.MAX_LOG }
  -- Tags with a version 2 (compact) form, and their version 1 length.
  M.V1_LEN = { T = 37, S = 37, F = 29, G = 37, Q = 29 }

  -- The key's value if it holds a limiter of `tag` (nil when missing), else the module's error.
  function M.read_value(key, tag)
    local v = redis.pcall("GETRANGE", key, 0, M.MAX_LEN[tag])
    if type(v) == "table" and v.err then
      M.fail(v.err)
    end
    if v == "" then
      if redis.call("EXISTS", key) == 0 then
        return nil
      end
      M.fail("ERR key holds a value that is not a redis-rl limiter")
    end
    if #v < 5 or v:sub(1, 3) ~= "\0RL" then
      M.fail("ERR key holds a value that is not a redis-rl limiter")
    end
    local version = byte(v, 4)
    -- Version 2 is the compact form of the fixed-size states, and the concurrency limiter's
    -- lease table (src/encoding).
    local v2_tag = v:sub(5, 5)
    if version ~= 1 and not (version == 2 and (v2_tag == "C" or M.V1_LEN[v2_tag])) then
      M.fail("ERR key holds a redis-rl limiter in format version " .. version .. ", this module reads version 1")
    end
    local stored = v:sub(5, 5)
    if not M.NAMES[stored] then
      M.fail("ERR key holds a redis-rl limiter of a kind this module does not know (tag " .. byte(v, 5) .. ")")
    end
    if stored ~= tag then
      M.fail("ERR key holds a " .. M.NAMES[stored] .. " limiter, not a " .. M.NAMES[tag] .. " limiter")
    end
    if #v > M.MAX_LEN[tag] then
      M.corrupt(tag)
    end
    return v
  end

  function M.valid_duration(n)
    return n and n >= 1 and n <= M.MAX_DURATION_MS
  end

  -- Fixed-size states: the value and its fields (version 2: varints, `wide` marking the
  -- u128 ones; nil fields when malformed), or the module's "corrupt" error.
  function M.read_fixed(key, tag, wide)
    local v = M.read_value(key, tag)
    if not v then
      return nil
    end
    if byte(v, 4) == 2 then
      return v, M.read_compact(v, wide) or M.corrupt(tag)
    end
    if #v ~= M.V1_LEN[tag] then
      M.corrupt(tag)
    end
    return v
  end

  function M.write(key, value, now, reset_after)
    local at = M.ceil_div(now, 1000) + reset_after + M.TTL_SLACK_MS
    local r = redis.pcall("SET", key, value, "PXAT", M.num(at))
    if type(r) == "table" and r.err then
      M.fail(r.err)
    end
  end

  -- A decision: allowed (true/false), limit, remaining, retry ("never" = -1), reset_after.
  function M.decision(allowed, limit, remaining, retry, reset_after)
    return { allowed = allowed, limit = limit, remaining = remaining, retry = retry, reset = reset_after }
  end

  -- The parameters of a window (RL.SLIDING, RL.FIXED).
  function M.window_params(args, i)
    local p = {}
    p.limit = M.count_param(args[i], "limit")
    p.window_ms = M.duration_param(args[i + 1], "window_ms")
    p.window = p.window_ms * 1000
    return p, i + 2
  end

  -- ---------------------------------------------------------------------------------------
  -- LEB128 varints (src/encoding: `Writer::varint`, `varint128`): the entries of a log, and
  -- every field of the fixed-size states in format version 2.
  M.LOAD.varint = function()
    -- A varint at `pos`: value, next position; nil when malformed or 2^53 or more.
    function M.read_varint(v, pos)
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
          if value > M.EXACT then
            return nil
          end
          return value, pos + k + 1
        end
        value = value + (b - 128) * scale
        scale = scale * 128
      end
      return nil
    end

    function M.varint(out, v)
      while v >= 128 do
        local q = floor(v / 128)
        out[#out + 1] = v - q * 128 + 128
        v = q
      end
      out[#out + 1] = v
    end

    -- A varint of up to 128 bits (a bignum or a number), as the module writes a u128.
    function M.bvarint(out, a)
      while type(a) ~= "number" do
        local q, r = M.bdivmod(a, 128)
        out[#out + 1] = r + 128
        a = q
      end
      M.varint(out, a)
    end

    -- A varint of up to 128 bits at `pos`: value (a bignum or a number), next position; nil
    -- when malformed (truncated, not in its shortest form, over 128 bits).
    function M.read_bvarint(v, pos)
      local groups = {}
      for k = 0, 18 do
        local b = byte(v, pos + k)
        if not b then
          return nil
        end
        if b < 128 then
          if (b == 0 and k > 0) or (k == 18 and b > 3) then
            return nil
          end
          groups[k + 1] = b
          local a = 0
          for g = #groups, 1, -1 do
            a = M.badd(M.bmul(a, 128), groups[g])
          end
          return a, pos + k + 1
        end
        groups[k + 1] = b - 128
      end
      return nil
    end

    -- The fields of a version 2 value (varints after the header; `wide` marks the u128
    -- fields): a list of values, or nil when malformed or when bytes are left over.
    function M.read_compact(v, wide)
      local out, pos = {}, 6
      for i, is_wide in ipairs(wide) do
        local value
        if is_wide then
          value, pos = M.read_bvarint(v, pos)
        else
          value, pos = M.read_varint(v, pos)
        end
        if value == nil then
          return nil
        end
        out[i] = value
      end
      if pos ~= #v + 1 then
        return nil
      end
      return out
    end

    -- A version 2 value: the header, then `fields` as varints (`wide` marks the u128 ones).
    function M.compact(tag, fields, wide)
      local out = {}
      for i, value in ipairs(fields) do
        if wide[i] then
          M.bvarint(out, value)
        else
          M.varint(out, value)
        end
      end
      return "\0RL\2" .. tag .. char(unpack(out))
    end
  end

  -- ---------------------------------------------------------------------------------------
  -- Token bucket (core/src/token_bucket.rs): level in units of 1/(refill_ms x 1000) token.
  M.LOAD.TB = function()

    M.TB = { tag = "T" }

    function M.TB.parse(args, i)
      local p = {}
      p.capacity = M.count_param(args[i], "capacity")
      p.rate = M.count_param(args[i + 1], "refill_tokens")
      p.refill_ms = M.duration_param(args[i + 2], "refill_ms")
      M.exact_wait(p.capacity, p.refill_ms, p.rate, "capacity x refill_ms / refill_tokens")
      p.unit = p.refill_ms * 1000
      p.full = M.bmul(M.bn(p.capacity), M.bn(p.unit))
      return p, i + 3
    end

    function M.TB.read(key)
      local v, f = M.read_fixed(key, "T", { true, false, true })
      if not v then
        return nil
      end
      local s
      if f then
        s = { updated_at = M.tb_instant(f[1]), refill_ms = f[2], level = f[3] }
      else
        s = { updated_at = M.read_u64(v, 6), refill_ms = M.read_u64(v, 14), level = M.read_u128(v, 22) }
      end
      if not s.updated_at or s.updated_at > M.LATEST_US or not M.valid_duration(s.refill_ms) then
        M.corrupt("T")
      end
      if M.bcmp(s.level, M.bmul(M.bn(M.MAX_COUNT), M.bn(s.refill_ms * 1000))) > 0 then
        M.corrupt("T")
      end
      return s
    end

    -- Version 2 stores the instant in us since 2020-01-01 (src/encoding/token_bucket.rs
    -- `EPOCH_US`), wrapping modulo 2^64 below it: the instant, or nil beyond the twin's range.
    M.TB_EPOCH_US = 1577836800000000
    function M.tb_instant(since)
      if type(since) == "number" then
        return since + M.TB_EPOCH_US
      end
      local before = M.bsub(M.badd(M.U64_MAX, 1), since)
      if type(before) == "number" and before <= M.TB_EPOCH_US then
        return M.TB_EPOCH_US - before
      end
      return nil
    end

    function M.TB.encode(s)
      local since = s.updated_at - M.TB_EPOCH_US
      if since < 0 then
        since = M.bsub(M.badd(M.U64_MAX, 1), M.TB_EPOCH_US - s.updated_at)
      end
      return M.compact("T", { since, s.refill_ms, s.level }, { true, false, true })
    end

    function M.tb_level_at(s, now, p)
      if not s then
        return p.full, now
      end
      local level = s.level
      if s.refill_ms ~= p.refill_ms then
        local old_unit = s.refill_ms * 1000
        level = M.bmin(level, M.bmul(M.bn(M.MAX_COUNT), M.bn(old_unit)))
        local q, r = M.bdivmod(level, old_unit)
        level = M.badd(M.bmul(q, M.bn(p.unit)), M.bdiv(M.bmul(M.bn(r), M.bn(p.unit)), old_unit))
      end
      local as_of = now > s.updated_at and now or s.updated_at
      local refilled = M.badd(level, M.bmul(M.bn(p.rate), M.bn(as_of - s.updated_at)))
      return M.bmin(refilled, p.full), as_of
    end

    function M.TB.check(s, now, p, cost)
      local level, as_of = M.tb_level_at(s, now, p)
      local lag = as_of - now
      local function wait_to_reach(target, from)
        return M.ceil_millis(M.badd(M.bdivceil(M.bsub(target, from), p.rate), M.bn(lag)))
      end
      local function decide(allowed, retry, after)
        return M.decision(allowed, p.capacity, M.bnum(M.bdiv(after, p.unit)), retry, wait_to_reach(p.full, after))
      end
      if cost > p.capacity then
        return decide(false, -1, level)
      end
      local need = M.bmul(M.bn(cost), M.bn(p.unit))
      if M.bcmp(level, need) < 0 then
        return decide(false, wait_to_reach(need, level), level)
      end
      local after = M.bsub(level, need)
      local new
      if cost > 0 then
        new = { level = after, updated_at = as_of, refill_ms = p.refill_ms }
      end
      return decide(true, 0, after), new
    end

    function M.TB.refund(s, now, p, amount)
      local level, as_of = M.tb_level_at(s, now, p)
      local refunded = M.bnum(M.bdivceil(M.bsub(p.full, level), p.unit))
      if refunded > amount then
        refunded = amount
      end
      if refunded == 0 then
        return 0
      end
      local new_level = M.bmin(M.badd(level, M.bmul(M.bn(refunded), M.bn(p.unit))), p.full)
      return refunded, { level = new_level, updated_at = as_of, refill_ms = p.refill_ms }
    end
  end

  -- ---------------------------------------------------------------------------------------
  -- Sliding window counter (core/src/sliding_window.rs).
  M.LOAD.SW = function()

    M.SW = { tag = "S" }

    M.SW.parse = M.window_params

    function M.SW.read(key)
      local v, f = M.read_fixed(key, "S", { false, false, false, false })
      if not v then
        return nil
      end
      local s
      if f then
        -- Version 2 stores the window's index (window_start / window_ms).
        local start = M.valid_duration(f[1]) and f[2] * f[1] or nil
        s = { window_ms = f[1], window_start = start, previous = f[3], current = f[4] }
      else
        s = { window_ms = M.read_u64(v, 6), window_start = M.read_u64(v, 14), previous = M.read_u64(v, 22), current = M.read_u64(v, 30) }
      end
      if not M.valid_duration(s.window_ms) or not s.window_start or s.window_start * 1000 > M.LATEST_US then
        M.corrupt("S")
      end
      if M.imod(s.window_start, s.window_ms) ~= 0 or not s.previous or s.previous > M.MAX_COUNT
        or not s.current or s.current > M.MAX_COUNT then
        M.corrupt("S")
      end
      return s
    end

    function M.SW.encode(s)
      return M.compact("S", { s.window_ms, M.idiv(s.window_start, s.window_ms), s.previous, s.current }, {})
    end

    function M.sw_view(s, now, p)
      local window = p.window
      if not s then
        return { start = now - M.imod(now, window), at = now, previous = 0, current = 0 }
      end
      local stored_start = s.window_start * 1000
      local at = now > stored_start and now or stored_start
      if s.window_ms ~= p.window_ms then
        local old = s.window_ms * 1000
        local old_start = at - M.imod(at, old)
        local d = old_start - stored_start
        local previous, current = 0, 0
        if d == 0 then
          previous, current = s.previous, s.current
        elseif d == old then
          previous = s.current
        end
        local elapsed = at - old_start
        local estimate = M.bdivceil(M.badd(M.bmul(M.bn(previous), M.bn(old - elapsed)), M.bmul(M.bn(current), M.bn(old))), old)
        return { start = at - M.imod(at, window), at = at, previous = 0, current = M.bnum(estimate) }
      end
      local start = at - M.imod(at, window)
      local d = start - stored_start
      local previous, current = 0, 0
      if d == 0 then
        previous, current = s.previous, s.current
      elseif d == window then
        previous = s.current
      end
      return { start = start, at = at, previous = previous, current = current }
    end

    function M.sw_earliest_allowed(v, cost, p)
      local window, limit = p.window, p.limit
      if v.previous > 0 then
        local spare = limit - (v.current + cost)
        if spare >= 0 then
          local part = M.bnum(M.bdiv(M.bmul(M.bn(spare), M.bn(window)), v.previous))
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
        local part = M.bnum(M.bdiv(M.bmul(M.bn(limit - cost), M.bn(window)), v.current))
        decay_needed = window - (part < window and part or window)
      end
      return next_start + decay_needed
    end

    function M.SW.check(s, now, p, cost)
      local v = M.sw_view(s, now, p)
      local window = p.window
      local budget = M.bmul(M.bn(p.limit), M.bn(window))
      local used = M.badd(M.bmul(M.bn(v.previous), M.bn(window - (v.at - v.start))), M.bmul(M.bn(v.current), M.bn(window)))
      local function since_now(instant)
        return instant > now and M.ceil_div(instant - now, 1000) or 0
      end
      local function decide(allowed, retry, used_after, current)
        local idle = 0
        if current > 0 then
          idle = v.start + 2 * window
        elseif v.previous > 0 then
          idle = v.start + window
        end
        return M.decision(allowed, p.limit, M.bnum(M.bdiv(M.bsub(budget, used_after), window)), retry, since_now(idle))
      end
      if cost > p.limit then
        return decide(false, -1, used, v.current)
      end
      local after = M.badd(used, M.bmul(M.bn(cost), M.bn(window)))
      if M.bcmp(after, budget) > 0 then
        local retry = since_now(M.sw_earliest_allowed(v, cost, p))
        return decide(false, retry > 1 and retry or 1, used, v.current)
      end
      local current = v.current + cost
      local new
      if cost > 0 then
        new = { window_ms = p.window_ms, window_start = M.ceil_div(v.start, 1000), previous = v.previous, current = current }
      end
      return decide(true, 0, after, current), new
    end

    function M.SW.refund(s, now, p, amount)
      if not s then
        return 0
      end
      local v = M.sw_view(s, now, p)
      local refunded = v.current < amount and v.current or amount
      if refunded == 0 or s.window_ms ~= p.window_ms then
        return 0
      end
      return refunded, {
        window_ms = p.window_ms,
        window_start = M.ceil_div(v.start, 1000),
        previous = v.previous,
        current = v.current - refunded,
      }
    end
  end

  -- ---------------------------------------------------------------------------------------
  -- Fixed window counter (core/src/fixed_window.rs).
  M.LOAD.FW = function()

    M.FW = { tag = "F" }

    M.FW.parse = M.window_params

    function M.FW.read(key)
      local v, f = M.read_fixed(key, "F", { false, false, false })
      if not v then
        return nil
      end
      local s
      if f then
        -- Version 2 stores the window's index (window_start / window_ms).
        local start = M.valid_duration(f[1]) and f[2] * f[1] or nil
        s = { window_ms = f[1], window_start = start, count = f[3] }
      else
        s = { window_ms = M.read_u64(v, 6), window_start = M.read_u64(v, 14), count = M.read_u64(v, 22) }
      end
      if not M.valid_duration(s.window_ms) or not s.window_start or s.window_start * 1000 > M.LATEST_US
        or M.imod(s.window_start, s.window_ms) ~= 0 or not s.count or s.count > M.MAX_COUNT then
        M.corrupt("F")
      end
      return s
    end

    function M.FW.encode(s)
      return M.compact("F", { s.window_ms, M.idiv(s.window_start, s.window_ms), s.count }, {})
    end

    function M.fw_current(s, now, window_ms)
      local now_ms = M.idiv(now, 1000)
      if not s then
        return now_ms - M.imod(now_ms, window_ms), 0
      end
      local at = now_ms > s.window_start and now_ms or s.window_start
      local n = at < s.window_start + s.window_ms and s.count or 0
      return at - M.imod(at, window_ms), n
    end

    function M.FW.check(s, now, p, cost)
      local start, n = M.fw_current(s, now, p.window_ms)
      local end_us = (start + p.window_ms) * 1000
      local until_end = end_us > now and M.ceil_div(end_us - now, 1000) or 0
      local function decide(allowed, retry, after)
        local remaining = p.limit > after and p.limit - after or 0
        return M.decision(allowed, p.limit, remaining, retry, after > 0 and until_end or 0)
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

    function M.FW.refund(s, now, p, amount)
      if not s then
        return 0
      end
      local start, n = M.fw_current(s, now, p.window_ms)
      local refunded = n < amount and n or amount
      if refunded == 0 or s.window_ms ~= p.window_ms then
        return 0
      end
      return refunded, { window_ms = p.window_ms, window_start = start, count = n - refunded }
    end
  end

  -- ---------------------------------------------------------------------------------------
  -- Calendar quota (core/src/quota.rs, core/src/calendar.rs): a fixed window whose windows
  -- are calendar periods at a fixed UTC offset; civil dates by Hinnant's algorithms.
  M.LOAD.QU = function()

    M.QU = { tag = "Q" }
    M.QU.PERIODS = { DAY = 1, WEEK = 2, MONTH = 3, YEAR = 4 }
    M.QU.PERIOD_ERROR = "ERR period must be DAY, WEEK, MONTH or YEAR"
    M.QU.TZ_ERROR = "tz must be an integer between -1439 and 1439"
    M.QU.DAY_MS = 86400000
    -- The options after the period, as `M.options` takes them.
    M.QU.OPTIONS = {
      { token = "TZ", value = "minutes", parse = function(s) return M.QU.tz(s) end,
        missing = function() return M.QU.TZ_ERROR end },
      { token = "ANCHOR", value = "day", parse = function(s) return M.integer(s, "anchor", 1, 31) end,
        missing = function() return M.range_text("anchor", 1, 31) end },
    }

    -- A signed offset in minutes (the module's `Spelling::Offset`).
    function M.QU.tz(s)
      if s == nil or not s:find("^%-?%d+$") or #s:gsub("^%-", "") > 19 then
        M.fail("ERR " .. M.QU.TZ_ERROR)
      end
      local n = tonumber(s)
      if not n or n < -1439 or n > 1439 then
        M.fail("ERR " .. M.QU.TZ_ERROR)
      end
      return n
    end

    -- limit and period at args[i], args[i + 1]; `finish` adds TZ and ANCHOR.
    function M.QU.base(args, i)
      local limit = M.count_param(args[i], "limit")
      local word = args[i + 1]
      local period = word and M.QU.PERIODS[word:upper()]
      if not period then
        M.fail(M.QU.PERIOD_ERROR)
      end
      return { limit = limit, period = period }
    end

    function M.QU.finish(p, tz, anchor)
      if anchor and p.period ~= 3 and anchor ~= 1 then
        M.param_error("anchor (for a period other than MONTH)", 1, 1)
      end
      p.tz = tz or 0
      p.anchor = anchor or 1
      return p
    end

    -- A spec: the options in any order, each once (a repeat is left for the next spec).
    function M.QU.parse(args, i)
      local p = M.QU.base(args, i)
      i = i + 2
      local given = {}
      local progress = true
      while progress and args[i] do
        progress = false
        for _, o in ipairs(M.QU.OPTIONS) do
          if not given[o.token] and args[i] and args[i]:upper() == o.token then
            if args[i + 1] == nil then
              M.fail("ERR option " .. o.token .. " needs a value: " .. o.missing())
            end
            given[o.token] = o.parse(args[i + 1])
            i = i + 2
            progress = true
          end
        end
      end
      return M.QU.finish(p, given.TZ, given.ANCHOR), i
    end

    function M.QU.read(key)
      local v, f = M.read_fixed(key, "Q", { false, false, false })
      if not v then
        return nil
      end
      local start, length, count
      if f then
        start, length, count = f[1], f[2], f[3]
      else
        start = M.read_u64(v, 6)
        local stop = M.read_u64(v, 14)
        count = M.read_u64(v, 22)
        length = start and stop and stop - start
      end
      if not start or not length or length < 1 or length > 367 * M.QU.DAY_MS or not count
        or count > M.MAX_COUNT or (start + length) * 1000 > M.LATEST_US then
        M.corrupt("Q")
      end
      return { period_start = start, period_end = start + length, count = count }
    end

    function M.QU.encode(s)
      return M.compact("Q", { s.period_start, s.period_end - s.period_start, s.count }, {})
    end

    function M.days_from_civil(y, m, d)
      if m <= 2 then
        y = y - 1
      end
      local era = M.idiv(y, 400)
      local yoe = y - era * 400
      local mp = m > 2 and m - 3 or m + 9
      local doy = M.idiv(153 * mp + 2, 5) + d - 1
      local doe = yoe * 365 + M.idiv(yoe, 4) - M.idiv(yoe, 100) + doy
      return era * 146097 + doe - 719468
    end

    function M.civil_from_days(z)
      z = z + 719468
      local era = M.idiv(z, 146097)
      local doe = z - era * 146097
      local yoe = M.idiv(doe - M.idiv(doe, 1460) + M.idiv(doe, 36524) - M.idiv(doe, 146096), 365)
      local doy = doe - (365 * yoe + M.idiv(yoe, 4) - M.idiv(yoe, 100))
      local mp = M.idiv(5 * doy + 2, 153)
      local d = doy - M.idiv(153 * mp + 2, 5) + 1
      local m = mp < 10 and mp + 3 or mp - 9
      return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
    end

    function M.days_in_month(y, m)
      if m == 2 then
        local leap = M.imod(y, 4) == 0 and (M.imod(y, 100) ~= 0 or M.imod(y, 400) == 0)
        return leap and 29 or 28
      end
      return (m == 4 or m == 6 or m == 9 or m == 11) and 30 or 31
    end

    function M.QU.first_day(p, y, m)
      local last = M.days_in_month(y, m)
      return p.anchor < last and p.anchor or last
    end

    -- The number of the period containing `at_ms` (grows by one per period).
    function M.QU.index(p, at_ms)
      local day = M.idiv(at_ms + p.tz * 60000, M.QU.DAY_MS)
      if p.period == 1 then
        return day
      elseif p.period == 2 then
        return M.idiv(day + 3, 7)
      elseif p.period == 3 then
        local y, m, d = M.civil_from_days(day)
        local month = y * 12 + m - 1
        return d < M.QU.first_day(p, y, m) and month - 1 or month
      end
      return (M.civil_from_days(day))
    end

    -- When period `index` starts, in ms since the epoch (0 for one that began before it).
    function M.QU.start_of(p, index)
      local day
      if p.period == 1 then
        day = index
      elseif p.period == 2 then
        day = index * 7 - 3
      elseif p.period == 3 then
        local y = M.idiv(index, 12)
        local m = index - y * 12 + 1
        day = M.days_from_civil(y, m, M.QU.first_day(p, y, m))
      else
        day = M.days_from_civil(index, 1, 1)
      end
      local ms = day * M.QU.DAY_MS - p.tz * 60000
      return ms > 0 and ms or 0
    end

    function M.QU.current(s, now, p)
      local now_ms = M.idiv(now, 1000)
      local at = (s and s.period_start > now_ms) and s.period_start or now_ms
      local index = M.QU.index(p, at)
      local n = (s and at < s.period_end) and s.count or 0
      return M.QU.start_of(p, index), M.QU.start_of(p, index + 1), n
    end

    function M.QU.check(s, now, p, cost)
      local start, stop, n = M.QU.current(s, now, p)
      local end_us = stop * 1000
      local until_end = end_us > now and M.ceil_div(end_us - now, 1000) or 0
      local function decide(allowed, retry, after)
        local remaining = p.limit > after and p.limit - after or 0
        return M.decision(allowed, p.limit, remaining, retry, after > 0 and until_end or 0)
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
        new = { period_start = start, period_end = stop, count = after }
      end
      return decide(true, 0, after), new
    end

    function M.QU.refund(s, now, p, amount)
      if not s then
        return 0
      end
      local start, stop, n = M.QU.current(s, now, p)
      local refunded = n < amount and n or amount
      if refunded == 0 or s.period_start ~= start or s.period_end ~= stop then
        return 0
      end
      return refunded, { period_start = start, period_end = stop, count = n - refunded }
    end
  end

  -- ---------------------------------------------------------------------------------------
  -- GCRA (core/src/gcra.rs): the arrival time in ticks of 1/limit us.
  M.LOAD.GC = function()

    M.GC = { tag = "G" }

    function M.gcra_params(limit, period_ms, burst)
      local p = { limit = limit, period_ms = period_ms, burst = burst or limit }
      M.exact_wait(p.burst, p.period_ms, p.limit, "burst x period_ms / limit")
      p.interval = period_ms * 1000
      return p
    end

    function M.GC.parse(args, i)
      local limit = M.count_param(args[i], "limit")
      local period_ms = M.duration_param(args[i + 1], "period_ms")
      i = i + 2
      local burst
      if args[i] and args[i]:upper() == "BURST" then
        if args[i + 1] == nil then
          M.fail("ERR option BURST needs a value: " .. M.range_text("burst", 1, M.MAX_COUNT))
        end
        burst = M.count_param(args[i + 1], "burst")
        i = i + 2
      end
      return M.gcra_params(limit, period_ms, burst), i
    end

    function M.GC.read(key)
      local v, f = M.read_fixed(key, "G", { true, false, false })
      if not v then
        return nil
      end
      local s
      if f then
        s = { tat = f[1], limit = f[2], period_ms = f[3] }
      else
        s = { tat = M.read_u128(v, 6), limit = M.read_u64(v, 22), period_ms = M.read_u64(v, 30) }
      end
      if not M.valid_duration(s.period_ms) or not s.limit or s.limit < 1 or s.limit > M.MAX_COUNT then
        M.corrupt("G")
      end
      local latest = M.badd(M.U64_MAX, M.bmul(M.bn(M.MAX_COUNT), M.bn(M.MAX_COUNT)))
      if M.bcmp(M.bdiv(s.tat, s.limit), latest) > 0 then
        M.corrupt("G")
      end
      return s
    end

    function M.GC.encode(s)
      return M.compact("G", { s.tat, s.limit, s.period_ms }, { true, false, false })
    end

    function M.gcra_tat_in(s, limit)
      if s.limit == limit then
        return s.tat
      end
      local q, r = M.bdivmod(s.tat, s.limit)
      return M.bsat(M.badd(M.bsat(M.bmul(q, M.bn(limit))), M.bdivceil(M.bmul(M.bn(r), M.bn(limit)), s.limit)))
    end

    function M.GC.check(s, now, p, cost)
      local now_t = M.bmul(M.bn(now), M.bn(p.limit))
      local tat = M.bmax(s and M.gcra_tat_in(s, p.limit) or 0, now_t)
      local horizon = M.badd(now_t, M.bmul(M.bn(p.burst), M.bn(p.interval)))
      local function to_millis(ticks)
        return M.ceil_millis(M.bdivceil(ticks, p.limit))
      end
      local function decide(allowed, retry, t)
        return M.decision(allowed, p.burst, M.bnum(M.bdiv(M.bsub(horizon, t), p.interval)), retry, to_millis(M.bsub(t, now_t)))
      end
      if cost > p.burst then
        return decide(false, -1, tat)
      end
      local after = M.bsat(M.badd(tat, M.bmul(M.bn(cost), M.bn(p.interval))))
      if M.bcmp(after, horizon) > 0 then
        return decide(false, to_millis(M.bsub(after, horizon)), tat)
      end
      local new
      if cost > 0 then
        new = { tat = after, limit = p.limit, period_ms = p.period_ms }
      end
      return decide(true, 0, after), new
    end

    function M.GC.refund(s, now, p, amount)
      local now_t = M.bmul(M.bn(now), M.bn(p.limit))
      local tat = s and M.gcra_tat_in(s, p.limit) or 0
      local refunded = M.bnum(M.bdivceil(M.bsub(tat, now_t), p.interval))
      if refunded > amount then
        refunded = amount
      end
      if refunded == 0 then
        return 0
      end
      local new_tat = M.bmax(M.bsub(tat, M.bmul(M.bn(refunded), M.bn(p.interval))), now_t)
      return refunded, { tat = new_tat, limit = p.limit, period_ms = p.period_ms }
    end
  end

  -- ---------------------------------------------------------------------------------------
  -- Sliding window log (core/src/sliding_log.rs): varint-encoded entries, oldest first.
  M.LOAD.LG = function()

    M.LG = { tag = "L" }

    function M.LG.parse(args, i)
      local p = {}
      p.limit = M.integer(args[i], "limit", 1, M.MAX_LOG)
      p.window_ms = M.duration_param(args[i + 1], "window_ms")
      p.window = p.window_ms * 1000
      return p, i + 2
    end

    function M.LG.read(key)
      local v = M.read_value(key, "L")
      if not v then
        return nil
      end
      local window_ms, pos = M.read_varint(v, 6)
      if not M.valid_duration(window_ms) then
        M.corrupt("L")
      end
      local at, total, times, counts = 0, 0, {}, {}
      while pos <= #v do
        local word, n
        word, pos = M.read_varint(v, pos)
        if not word then
          M.corrupt("L")
        end
        n = 1
        if word % 2 == 1 then
          n, pos = M.read_varint(v, pos)
          if not n or n < 2 then
            M.corrupt("L")
          end
        end
        at = at + floor(word / 2)
        total = total + n
        if at > M.LATEST_US or total > M.MAX_LOG then
          M.corrupt("L")
        end
        times[#times + 1] = at
        counts[#counts + 1] = n
      end
      return { window_ms = window_ms, times = times, counts = counts }
    end

    function M.LG.encode(s)
      local out = {}
      M.varint(out, s.window_ms)
      local previous = 0
      for i = 1, #s.times do
        local delta = s.times[i] - previous
        previous = s.times[i]
        if s.counts[i] == 1 then
          M.varint(out, delta * 2)
        else
          M.varint(out, delta * 2 + 1)
          M.varint(out, s.counts[i])
        end
      end
      local parts = { M.header("L") }
      for i = 1, #out, 4096 do
        parts[#parts + 1] = char(unpack(out, i, math.min(i + 4095, #out)))
      end
      return table.concat(parts)
    end

    function M.LG.check(s, now, p, cost)
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
        return instant > now and M.ceil_div(instant - now, 1000) or 0
      end
      local newest = first_live <= n and times[n] or nil
      local function decide(allowed, retry, u, last)
        return M.decision(allowed, limit, limit > u and limit - u or 0, retry, last and since_now(last + window) or 0)
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

    function M.LG.refund(s, now, p, amount)
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
  end

  -- ---------------------------------------------------------------------------------------
  -- Commands.

  M.ALGORITHMS = "TOKENBUCKET, SLIDING, FIXED, GCRA, LOG or QUOTA"
  -- An algorithm's table, its code (and the bignums it needs) defined on first use: only what a
  -- call uses is created (each function defined costs every call).
  local NEEDS_BIGNUM = { TB = true, SW = true, GC = true }

  function M.algo(name)
    if not M[name] then
      if NEEDS_BIGNUM[name] and not M.bn then
        M.LOAD.bignum()
      end
      if not M.varint then
        M.LOAD.varint()
      end
      M.LOAD[name]()
    end
    return M[name]
  end

  M.SPECS = { TOKENBUCKET = "TB", SLIDING = "SW", FIXED = "FW", GCRA = "GC", LOG = "LG", QUOTA = "QU" }
  M.SINGLE = {
    ["RL.TOKENBUCKET"] = "TB",
    ["RL.SLIDING"] = "SW",
    ["RL.FIXED"] = "FW",
    ["RL.GCRA"] = "GC",
    ["RL.LOG"] = "LG",
    ["RL.QUOTA"] = "QU",
  }

  function M.now_us()
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end

  function M.check_exact(d)
    if d.remaining > M.EXACT or d.retry > M.EXACT or d.reset > M.EXACT then
      M.fail("ERR a reply value is beyond the exact range of the Lua twin (2^53): use the module for this key")
    end
    return d
  end

  function M.reply(d)
    return { d.allowed and 1 or 0, d.limit, d.remaining, d.retry, d.reset }
  end

  function M.arity(name)
    M.fail("ERR wrong number of arguments for '" .. name .. "' command")
  end

  -- A spec of RL.ALL or RL.REFUND at args[i]: algorithm, params, next index; errors as SpecError.
  function M.parse_spec(args, i, prefix)
    local ok, a, p, nxt = pcall(function()
      local name = args[i]
      if name == nil then
        M.fail("missing, expected " .. M.ALGORITHMS .. " and its parameters")
      end
      local algo = M.SPECS[name:upper()]
      if algo then
        algo = M.algo(algo)
      end
      if not algo then
        M.fail("unknown algorithm '" .. M.shown(name) .. "', expected " .. M.ALGORITHMS)
      end
      local params, after = algo.parse(args, i + 1)
      return algo, params, after
    end)
    if not ok then
      local text = tostring(a)
      if text:sub(1, #M.MARK) ~= M.MARK then
        error(a, 0)
      end
      text = text:sub(#M.MARK + 1):gsub("^ERR ", "")
      M.fail("ERR " .. prefix .. text)
    end
    return a, p, nxt
  end

  function M.single(name, algo, args)
    if #M.KEYS ~= 1 or #args < (algo == M.TB and 4 or 3) then
      M.arity(name)
    end
    local p, i
    if algo == M.GC then
      local limit = M.count_param(args[2], "limit")
      local period_ms = M.duration_param(args[3], "period_ms")
      local cost, peek, burst, upto = M.options(args, 4, true, true)
      return algo, M.gcra_params(limit, period_ms, burst), cost, peek, upto
    end
    if algo == M.QU then
      p = M.QU.base(args, 2)
      local cost, peek, _, upto, given = M.options(args, 4, false, true, M.QU.OPTIONS)
      return algo, M.QU.finish(p, given.TZ, given.ANCHOR), cost, peek, upto
    end
    p, i = algo.parse(args, 2)
    local cost, peek, _, upto = M.options(args, i, false, algo ~= M.LG)
    return algo, p, cost, peek, upto
  end

  function M.run_single(name, algo, args)
    local p, cost, peek, upto
    algo, p, cost, peek, upto = M.single(name, algo, args)
    local key = M.KEYS[1]
    local state = algo.read(key)
    local now = M.now_us()
    local d, new, granted
    if upto then
      d, new, granted = M.upto(algo, state, now, p, cost)
    else
      d, new = algo.check(state, now, p, cost)
    end
    M.check_exact(d)
    if new and not peek then
      M.write(key, algo.encode(new), now, d.reset)
    end
    local reply = M.reply(d)
    if upto then
      reply[6] = granted
    end
    return reply
  end

  function M.run_all(args)
    local n = #M.KEYS
    if n + #args < 3 then
      M.arity(args[1])
    end
    if n < 1 or n > M.MAX_ALL_KEYS then
      M.param_error("numkeys", 1, M.MAX_ALL_KEYS)
    end
    for i = 2, n do
      for j = 1, i - 1 do
        if M.KEYS[j] == M.KEYS[i] then
          M.fail("ERR key " .. i .. " repeats an earlier key: each key may appear once")
        end
      end
    end
    local specs, at = {}, 2
    for i = 1, n do
      local algo, p
      algo, p, at = M.parse_spec(args, at, "spec " .. i .. ": ")
      specs[i] = { algo = algo, p = p }
    end
    local cost, peek = M.options(args, at, false, false)
    local states = {}
    for i = 1, n do
      states[i] = specs[i].algo.read(M.KEYS[i])
    end
    local now = M.now_us()
    local decisions, writes, denied = {}, {}, 0
    for i = 1, n do
      decisions[i], writes[i] = specs[i].algo.check(states[i], now, specs[i].p, cost)
      M.check_exact(decisions[i])
      if denied == 0 and not decisions[i].allowed then
        denied = i
      end
    end
    if denied > 0 then
      for i = 1, n do
        if decisions[i].allowed then
          decisions[i] = M.check_exact(specs[i].algo.check(states[i], now, specs[i].p, 0))
        end
      end
    elseif not peek then
      for i = 1, n do
        if writes[i] then
          M.write(M.KEYS[i], specs[i].algo.encode(writes[i]), now, decisions[i].reset)
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

  function M.run_refund(args)
    if #M.KEYS ~= 1 or #args < 4 then
      M.arity(args[1])
    end
    local algo, p, i = M.parse_spec(args, 2, "spec: ")
    local rest = #args - i + 1
    local amount
    if rest == 0 then
      M.fail("ERR RL.REFUND needs COST n: the units to give back")
    elseif args[i]:upper() ~= "COST" then
      M.fail("ERR unknown option '" .. M.shown(args[i]) .. "', expected COST n")
    elseif rest == 1 then
      M.fail("ERR option COST needs a value: " .. M.range_text("cost", 0, M.MAX_COUNT))
    elseif rest > 2 then
      M.fail("ERR option COST given more than once")
    end
    amount = M.integer(args[i + 1], "cost", 0, M.MAX_COUNT)
    local key = M.KEYS[1]
    local state = algo.read(key)
    local now = M.now_us()
    local refunded, new = algo.refund(state, now, p, amount)
    local view = M.check_exact(algo.check(new or state, now, p, 0))
    if new then
      M.write(key, algo.encode(new), now, view.reset)
    end
    return { refunded, view.limit, view.remaining, 0, view.reset }
  end

  function M.main(args)
    local name = args[1]
    if name == nil then
      M.fail("ERR the Lua twin needs the command name after the keys (RL.TOKENBUCKET, RL.ALL, ...)")
    end
    local upper = name:upper()
    local algo = M.SINGLE[upper]
    if algo then
      algo = M.algo(algo)
      return M.run_single(name, algo, args)
    elseif upper == "RL.ALL" then
      return M.run_all(args)
    elseif upper == "RL.REFUND" then
      return M.run_refund(args)
    end
    M.fail("ERR unknown command '" .. M.shown(name) .. "' for the Lua twin")
  end
  return M
end

local M

-- One call: `keys` and `args` as FCALL (or EVALSHA) passes them.
local function rl(keys, args)
  M = M or build()
  M.KEYS = keys
  local ok, result = pcall(M.main, args)
  if ok then
    return result
  end
  local text = tostring(type(result) == "table" and result.err or result)
  if text:sub(1, #M.MARK) == M.MARK then
    return redis.error_reply(text:sub(#M.MARK + 1))
  end
  return redis.error_reply("ERR internal error in the redis-rl Lua twin (a bug: please report it): " .. text)
end

if redis.register_function then
  redis.register_function("rl", rl)
else
  return rl(KEYS, ARGV)
end
