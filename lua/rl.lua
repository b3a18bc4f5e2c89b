#!lua name=redisrl
-- redis-rl's Lua twin: the module's commands as one script, for servers that cannot load
-- modules (managed Redis and Valkey). Same replies, same error texts, same stored bytes as
-- the module, so a key written here is read and continued by the module and the other way
-- round. See docs/src/without-module.md.
--
-- Built by `make lua` from lua/src (this frame, one file per algorithm, the shared
-- sections) and tables generated from the core's registry: edit those, not lua/rl.lua.
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
-- Commands: RL.TOKENBUCKET, RL.SLIDING, RL.FIXED, RL.GCRA, RL.LOG, RL.THROTTLE,
-- RL.CONCURRENCY, RL.ALL, RL.REFUND, RL.STATE, RL.RESET.
--
-- Time is the server's (TIME, in microseconds); writes replicate as their effects
-- (`SET key value PXAT ms`, the default from Redis 7.0); a denied call, a PEEK and a COST 0
-- write nothing.
--
-- Exactness: Lua numbers are doubles, exact for integers below 2^53. Every quantity that
-- can exceed that (a token bucket's level, a GCRA arrival time: up to 2^128) is a bignum
-- of 24-bit limbs, with exact integer division; below 2^53 the same operations run on
-- plain numbers. Every parameter range of the module is accepted. What the twin cannot
-- represent, it refuses instead of rounding:
-- * a reply field above 2^53 - 1 ms (a token bucket whose capacity x refill_ms /
--   refill_tokens, or a GCRA whose burst x period_ms / limit, is over 2^53 - 1 ms,
--   about 285,000 years): `ERR ... beyond the exact range of the Lua twin ...`, nothing
--   written;
-- * a stored instant after 2^52 us (year 2112) reads as a corrupt limiter.

local function build()
  -- Everything is built on the first call (FUNCTION LOAD runs the library without `math`
  -- or `string`) and kept: a library defines its functions once, a script on every call.
  local M = { ALGO = {}, COMMANDS = {} }
  M.TTL_SLACK_MS = 1000 -- the module's rl.ttl-slack-ms default
  M.MAX_ALL_KEYS = 16 -- rl.max-all-keys default
  M.EXACT = 9007199254740991 -- 2^53 - 1: the largest reply field the twin sends
  M.LATEST_US = 4503599627370496 -- 2^52: the latest stored instant the twin reads
  local floor = math.floor
  local byte, char, fmt, find, sub = string.byte, string.char, string.format, string.find, string.sub
  local call, pcall_redis = redis.call, redis.pcall
  local spack, sunpack = struct.pack, struct.unpack
  -- The last second TIME gave (its text) and it in us: converted once per second.
  local clock_s, clock_us
  -- Never written: `(t[a] or EMPTY)[b]` looks two levels down in one expression.
  local EMPTY = {}

  -- Generated from core/src/registry.rs by `make lua`: edit the registry, not this.
  M.MAX_COUNT = 1000000000000000
  M.MAX_DURATION_MS = 1000000000000
  M.COST = { "cost", 0, 1000000000000000 }
  M.THROTTLE = { { "max_burst", 0, 999999999999999 }, { "count", 1, 1000000000000000 }, { "period_s", 1, 1000000000 }, { "quantity", 0, 1000000000000000 } }
  M.MAX_ID_LEN = 256
  -- Every algorithm by its tag byte: name in texts, spec word, section, ranges.
  M.KINDS = {
    T = { tag = 'T', name = "token bucket", spec = "TOKENBUCKET", section = "token_bucket", limiter = true, upto = true,
      params = { { "capacity", 1, 1000000000000000 }, { "refill_tokens", 1, 1000000000000000 }, { "refill_ms", 1, 1000000000000 } },
      options = {  } },
    S = { tag = 'S', name = "sliding window", spec = "SLIDING", section = "sliding_window", limiter = true, upto = true,
      params = { { "limit", 1, 1000000000000000 }, { "window_ms", 1, 1000000000000 } },
      options = {  } },
    F = { tag = 'F', name = "fixed window", spec = "FIXED", section = "fixed_window", limiter = true, upto = true,
      params = { { "limit", 1, 1000000000000000 }, { "window_ms", 1, 1000000000000 } },
      options = {  } },
    G = { tag = 'G', name = "GCRA", spec = "GCRA", section = "gcra", limiter = true, upto = true,
      params = { { "limit", 1, 1000000000000000 }, { "period_ms", 1, 1000000000000 } },
      options = { { token = "BURST", value = "b", "burst", 1, 1000000000000000 } } },
    L = { tag = 'L', name = "sliding window log", spec = "LOG", section = "sliding_window_log", limiter = true, upto = false,
      params = { { "limit", 1, 10000 }, { "window_ms", 1, 1000000000000 } },
      options = {  } },
    Q = { tag = 'Q', name = "calendar quota", spec = "QUOTA", section = "calendar_quota", limiter = true, upto = true,
      params = { { "limit", 1, 1000000000000000 }, { "period", 1, 4 } },
      options = { { token = "TZ", value = "minutes", "tz", 0, 2878 }, { token = "ANCHOR", value = "day", "anchor", 1, 31 } } },
    C = { tag = 'C', name = "concurrency", spec = "CONCURRENCY", section = "concurrency", limiter = false, upto = false,
      params = { { "limit", 1, 10000 }, { "lease_ms", 1, 1000000000000 } },
      options = {  } },
  }
  -- The rate limiters (RL.ALL and RL.REFUND specs), in the order texts list them.
  M.LIMITERS = { "T", "S", "F", "G", "L", "Q" }
  M.ALGORITHMS = "TOKENBUCKET, SLIDING, FIXED, GCRA, LOG or QUOTA"

  -- ------------------------------------------------------------------------------------------
  -- lua/src/args.lua
  -- Errors and arguments, texts as the module's.

  -- Errors travel as strings with a mark (Redis 7.0 turns an error object into its text), so
  -- the entry point tells ours (and the server's) from a bug.
  M.MARK = "\1rl\1"

  function M.fail(text)
    error(M.MARK .. text, 0)
  end

  -- An option given twice (src/args.rs: RepeatedOption).
  function M.fail_repeated(name)
    M.fail("ERR option " .. name .. " given more than once")
  end

  -- An argument as error texts show it: printable ASCII, other bytes as \xNN, at most 40.
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

  function M.range_text(r)
    return r[1] .. " must be an integer between " .. M.num(r[2]) .. " and " .. M.num(r[3])
  end

  function M.param_error(r)
    M.fail("ERR " .. M.range_text(r))
  end

  -- A plain decimal integer in the range r = { name, min, max } (the module's `integer`):
  -- digits only; any value over 2^53 is a double over every maximum, so the check is exact.
  local function integer(s, r)
    if s == nil or s == "" or find(s, "%D") then
      M.param_error(r)
    end
    local n = tonumber(s)
    if n < r[2] or n > r[3] then
      M.param_error(r)
    end
    return n
  end
  M.integer = integer

  -- The positional parameters of the algorithm with tag `tag` from args[i..]: a list of
  -- numbers, and the next index.
  function M.positional(tag, args, i)
    local ranges = M.KINDS[tag].params
    local values = {}
    for k = 1, #ranges do
      values[k] = integer(args[i + k - 1], ranges[k])
    end
    return values, i + #ranges
  end

  -- `[<option> v...] [COST n] [UPTO] [FORCE] [PEEK]` from args[i..] in any order, each at most
  -- once: cost, peek, upto, the algorithm's own options by token (`BURST`: nil when none is
  -- given) and force. Its own options are the section's `options` (with their own parse and
  -- text) or the registry's (integers in a range). `with_upto` says whether UPTO is accepted.
  function M.options(args, i, tag, with_upto)
    local n = #args
    if i > n then
      return 1, false, false, nil, false
    end
    local own = {}
    if tag then
      own = M.ALGO[tag].options or M.KINDS[tag].options
    end
    local cost, peek, upto, given, force
    while i <= n do
      local name = args[i]:upper()
      local o
      for k = 1, #own do
        if own[k].token == name then
          o = own[k]
        end
      end
      if o then
        given = given or {}
        if given[name] then
          M.fail_repeated(name)
        end
        if args[i + 1] == nil then
          M.fail("ERR option " .. name .. " needs a value: " .. (o.missing and o.missing() or M.range_text(o)))
        end
        given[name] = o.parse and o.parse(args[i + 1]) or integer(args[i + 1], o)
        i = i + 2
      elseif name == "COST" then
        if cost then
          M.fail_repeated("COST")
        end
        if args[i + 1] == nil then
          M.fail("ERR option COST needs a value: " .. M.range_text(M.COST))
        end
        cost = integer(args[i + 1], M.COST)
        i = i + 2
      elseif name == "PEEK" then
        if peek then
          M.fail_repeated("PEEK")
        end
        peek = true
        i = i + 1
      elseif with_upto and name == "UPTO" then
        if upto then
          M.fail_repeated("UPTO")
        end
        upto = true
        i = i + 1
      elseif name == "FORCE" then
        if force then
          M.fail_repeated("FORCE")
        end
        force = true
        i = i + 1
      else
        local expected = {}
        for k = 1, #own do
          expected[k] = own[k].token .. " " .. own[k].value .. ", "
        end
        M.fail("ERR unknown option '" .. M.shown(args[i]) .. "', expected " .. table.concat(expected)
          .. (with_upto and "COST n, UPTO, FORCE or PEEK" or "COST n, FORCE or PEEK"))
      end
    end
    if upto and force then
      -- A partial grant takes what fits; forcing takes everything: they contradict.
      M.fail("ERR options UPTO and FORCE cannot be combined")
    end
    return cost or 1, peek or false, upto or false, given, force or false
  end

  function M.arity(name)
    M.fail("ERR wrong number of arguments for '" .. name .. "' command")
  end

  -- The server's time in us (TIME); the fast code has the same lines.
  function M.now_us()
    local t = call("TIME")
    if t[1] ~= clock_s then
      clock_s, clock_us = t[1], t[1] * 1000000
    end
    return clock_us + t[2]
  end

  -- The section of a window algorithm (RL.SLIDING, RL.FIXED, RL.LOG) with tag `tag`, its
  -- parameters parsed: limit, window_ms, and the window in us.
  function M.window_algorithm(tag)
    local algo = { tag = tag }
    function algo.parse(args, i)
      local v, nxt = M.positional(tag, args, i)
      return { limit = v[1], window_ms = v[2], window = v[2] * 1000 }, nxt
    end
    M.ALGO[tag] = algo
    return algo
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/storage.lua
  -- Stored bytes: magic "\0RL", version, tag, fields (src/encoding): version 1 has
  -- little-endian fixed-width fields (a log: varints), version 2 the fields of a fixed-size
  -- state as varints (the module writes it for T, S, F, G; the twin writes version 1), a
  -- concurrency limiter's lease table, and a log of fixed-width entries (the twin's earlier
  -- layout); version 3 a log of fixed-width entries with running counts (the twin writes it).

  function M.corrupt(tag)
    M.fail("ERR key holds a corrupt redis-rl " .. M.KINDS[tag].name .. " limiter")
  end

  function M.not_ours()
    M.fail("ERR key holds a value that is not a redis-rl limiter")
  end

  -- The longest value a valid limiter of each kind has (src/encoding: `MAX_BODY_LEN`); a
  -- longer one is corrupt and is never read whole.
  M.MAX_LEN = {
    T = 5 + 39, S = 5 + 40, F = 5 + 30, G = 5 + 39, Q = 5 + 30,
    L = 5 + 6 + 12 * M.KINDS.L.params[1][3],
    C = 17 + 32768 * (14 + M.MAX_ID_LEN),
  }
  -- Tags with a version 2 (compact) form, and their version 1 length.
  M.V1_LEN = { T = 37, S = 37, F = 29, G = 37, Q = 29 }

  -- The tag of a value with our header, after the module's checks of version and kind.
  function M.tag_of(v)
    if #v < 5 or sub(v, 1, 3) ~= "\0RL" then
      M.not_ours()
    end
    local version, stored = byte(v, 4), sub(v, 5, 5)
    if version ~= 1 and not (version == 2 and (stored == "C" or stored == "L" or M.V1_LEN[stored]))
      and not (version == 3 and stored == "L") then
      M.fail("ERR key holds a redis-rl limiter in format version " .. version .. ", this module reads version 1")
    end
    if not M.KINDS[stored] then
      M.fail("ERR key holds a redis-rl limiter of a kind this module does not know (tag " .. byte(v, 5) .. ")")
    end
    return stored
  end

  -- The key's first `len` bytes (nil when missing), or the server's error (WRONGTYPE).
  function M.get_prefix(key, len)
    local v = pcall_redis("GETRANGE", key, 0, len)
    if type(v) == "table" and v.err then
      M.fail(v.err)
    end
    if v == "" then
      if call("EXISTS", key) == 0 then
        return nil
      end
      M.not_ours()
    end
    return v
  end

  -- The key's value if it holds a limiter of `tag` (nil when missing), else the module's error.
  function M.read_value(key, tag)
    local v = M.get_prefix(key, M.MAX_LEN[tag])
    if not v then
      return nil
    end
    local stored = M.tag_of(v)
    if stored ~= tag then
      M.fail("ERR key holds a " .. M.KINDS[stored].name .. " limiter, not a " .. M.KINDS[tag].name .. " limiter")
    end
    if #v > M.MAX_LEN[tag] then
      M.corrupt(tag)
    end
    return v
  end

  function M.valid_duration(n)
    return n and n >= 1 and n <= M.MAX_DURATION_MS
  end

  -- A fixed-size state's value and, for version 2, its fields (varints; `wide` marks the
  -- u128 ones, `u64` the ones that must fit 64 bits), or the module's "corrupt" error.
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

  -- A window's value and, for version 2, its fields with the window's index (field 2)
  -- turned into the window's start (nil when the window is not valid).
  function M.read_window(key, tag, wide)
    local v, f = M.read_fixed(key, tag, wide)
    if f then
      f[2] = M.valid_duration(f[1]) and f[2] * f[1] or nil
    end
    return v, f
  end

  -- Writes `value`, expiring `reset_after` ms after `now` (us) plus the TTL slack, as the
  -- module does. A number argument reaches the server as its exact integer text.
  function M.write(key, value, now, reset_after)
    local at = floor(now / 1000)
    if at * 1000 < now then
      at = at + 1
    end
    local r = pcall_redis("SET", key, value, "PXAT", at + reset_after + M.TTL_SLACK_MS)
    if type(r) == "table" and r.err then
      M.fail(r.err)
    end
  end

  -- A decision: allowed (true/false), limit, remaining, retry ("never" = -1), reset_after.
  function M.decision(allowed, limit, remaining, retry, reset_after)
    return { allowed = allowed, limit = limit, remaining = remaining, retry = retry, reset = reset_after }
  end

  function M.u64_bytes(n)
    local b = {}
    for i = 1, 8 do
      local q = floor(n / 256)
      b[i] = n - q * 256
      n = q
    end
    return char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
  end

  -- A u64 field at offset `at` (1-based); nil when 2^53 or more (read as 48 + 16 bits, so
  -- the double is never rounded).
  function M.read_u64(s, at)
    local low, high = sunpack("<I6I2", s, at)
    if high >= 32 then
      return nil
    end
    return low + high * 281474976710656
  end

  -- Version 1 of a fixed-size state, which the twin writes (the module reads it, and writes
  -- version 2 from then on): the header, then `fields` as 8-byte little-endian integers, all
  -- numbers below 2^53, packed by the server's `struct` library in one call. Version 1 costs a
  -- few bytes more per key than the module's varints, and saves the twin a loop per byte.
  function M.fixed_v1(tag, a, b, c, d)
    if d then
      return "\0RL\1" .. tag .. spack("<I8I8I8I8", a, b, c, d)
    end
    return "\0RL\1" .. tag .. spack("<I8I8I8", a, b, c)
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/bignum.lua
  -- Exact integer arithmetic on doubles.

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

  -- The smaller of two numbers (a refund gives back at most what was asked).
  function M.at_most(a, b)
    return a < b and a or b
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

  -- --------------------------------------------------------------------------------------
  -- Integers of up to 128 bits and more: a Lua number while the value is below 2^53 (exact, and
  -- fast), else an array of 24-bit limbs, least significant first, no trailing zero limbs
  -- (limb products stay below 2^48, so every step is exact in doubles). Every operation takes
  -- either form and returns a number whenever the result fits.
  do
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

    function M.bn(n) -- the identity: numbers and limb arrays mix freely
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

  -- ------------------------------------------------------------------------------------------
  -- lua/src/varint.lua
  -- LEB128 varints (src/encoding: `Writer::varint`, `varint128`): the entries of a log, and
  -- every field of the fixed-size states in format version 2.

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
  M.read_varint = read_varint

  local function varint(out, v)
    -- `%` and an exact division instead of math.floor: no C call per byte.
    while v >= 128 do
      local r = v % 128
      out[#out + 1] = r + 128
      v = (v - r) / 128
    end
    out[#out + 1] = v
  end
  M.varint = varint

  -- A varint of up to 128 bits (a bignum or a number), as the module writes a u128: a
  -- bignum's 24-bit limbs are cut into 7-bit groups directly.
  function M.bvarint(out, a)
    if type(a) == "number" then
      return varint(out, a)
    end
    local groups, acc, bits = {}, 0, 0
    for i = 1, #a do
      acc = acc + a[i] * 2 ^ bits
      bits = bits + 24
      while bits >= 7 do
        local q = floor(acc / 128)
        groups[#groups + 1] = acc - q * 128
        acc, bits = q, bits - 7
      end
    end
    while acc > 0 do
      local q = floor(acc / 128)
      groups[#groups + 1] = acc - q * 128
      acc = q
    end
    local n = #groups
    while n > 1 and groups[n] == 0 do
      n = n - 1
    end
    for i = 1, n - 1 do
      out[#out + 1] = groups[i] + 128
    end
    out[#out + 1] = groups[n]
  end

  -- A varint of up to 128 bits at `pos` (`bits`: 64 or 128): value (a bignum or a number),
  -- next position; nil when malformed (truncated, not in its shortest form, over `bits`).
  -- Below 2^53 it is read as a number (read_varint); above, its 7-bit groups are packed
  -- into limbs.
  local function read_bvarint(v, pos, bits)
    local value, nxt = read_varint(v, pos)
    if value then
      return value, nxt
    end
    local last = bits == 64 and 9 or 18
    local top = bits == 64 and 1 or 3
    local limbs, acc, have = {}, 0, 0
    for k = 0, last do
      local b = byte(v, pos + k)
      if not b then
        return nil
      end
      local final = b < 128
      if final and ((b == 0 and k > 0) or (k == last and b > top)) then
        return nil
      end
      acc = acc + (final and b or b - 128) * 2 ^ have
      have = have + 7
      if have >= 24 then
        local q = floor(acc / 16777216)
        limbs[#limbs + 1] = acc - q * 16777216
        acc, have = q, have - 24
      end
      if final then
        limbs[#limbs + 1] = acc
        return M.trim(limbs), pos + k + 1
      end
    end
    return nil
  end

  -- The fields of a version 2 value (varints after the header; `wide[i]` is 128 or 64 for
  -- the fields that may exceed 2^53, their width): a list of values, or nil when malformed
  -- or when bytes are left over.
  function M.read_compact(v, wide)
    local out, pos = {}, 6
    for i = 1, #wide do
      local bits, value = wide[i]
      if bits then
        value, pos = read_bvarint(v, pos, bits)
      else
        value, pos = read_varint(v, pos)
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

  -- A version 2 value: the header, then `fields` as varints (numbers or bignums), built in
  -- one reused table.
  local scratch = {}
  function M.compact(tag, fields)
    local n = 0
    for i = 1, #fields do
      local v = fields[i]
      if type(v) == "number" then
        while v >= 128 do
          local r = v % 128
          n = n + 1
          scratch[n] = r + 128
          v = (v - r) / 128
        end
        n = n + 1
        scratch[n] = v
      else
        local out = {}
        M.bvarint(out, v)
        for j = 1, #out do
          n = n + 1
          scratch[n] = out[j]
        end
      end
    end
    return "\0RL\2" .. tag .. char(unpack(scratch, 1, n))
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/fast.lua
  -- The fast path: the common call of a rate limiter (one key, its positional parameters, at
  -- most the options its section takes, on a missing key or a version 1 value of the same
  -- parameters whose numbers stay below 2^52) answered on plain numbers, with no intermediate
  -- tables and the arguments parsed once per distinct text. Anything else (another option,
  -- a bad argument, a value of version 2 or of other parameters, a number out of that range)
  -- returns nil before any write, and the general path answers it: same replies, same bytes,
  -- same expiries, the bignums and every error text there. The fast code calls the server with
  -- redis.pcall and returns nil itself when a call fails (WRONGTYPE, NOPERM): before any write,
  -- or at a write whose refusal leaves a value the general path continues to the same bytes;
  -- so the entry point runs it without a pcall of its own (about 500 server instructions a
  -- call). Each command's fast code is one function: it reads the key (GETRANGE from 0, and
  -- EXISTS when that is empty), the server's clock (TIME) and its arguments (the caches below)
  -- inline, and computes its waits and expiry inline, since a call from one Lua function to
  -- another costs the server about as much as ten lines of arithmetic.

  -- The command name as sent (exact case) -> function(key, args) -> reply, or nil.
  M.FAST_DIRECT = {}

  -- 2^52: every quantity of a fast call stays below it, so sums of two stay exact.
  local FAST_MAX = 4503599627370496
  M.FAST_MAX = FAST_MAX

  -- Parsed arguments by their text, so a limiter's usual call converts no digits: positional
  -- parameters in a tree per command (one level per parameter), option values by text.
  -- Bounded: emptied when they hold too many.
  local TREES, VALUES, cached = {}, {}, 0
  local CACHE_MAX = 1024

  local function forget_if_full()
    cached = cached + 1
    if cached > CACHE_MAX then
      for _, tree in ipairs(TREES) do
        for k in pairs(tree) do
          tree[k] = nil
        end
      end
      for k in pairs(VALUES) do
        VALUES[k] = nil
      end
      cached = 0
    end
  end

  -- A plain decimal integer of at most MAX_COUNT (digits only, as the module's `integer`),
  -- or false.
  local function plain(s)
    if s == "" or find(s, "%D") then
      return false
    end
    local n = tonumber(s)
    return n <= M.MAX_COUNT and n
  end

  -- An option's value (COST, BURST, a quantity) as `plain`, cached (the fast code looks it
  -- up in M.FAST_VALUES first: `VALUES[s] or M.fast_value(s)`).
  M.FAST_VALUES = VALUES
  function M.fast_value(s)
    local n = VALUES[s]
    if n == nil then
      n = plain(s)
      VALUES[s] = n
      forget_if_full()
    end
    return n
  end

  -- The positional parameters args[2 .. count + 1] of a call, parsed (checked against
  -- `ranges`, turned by `prepare(a, b, c)` into what the fast code needs, false when the
  -- general path answers them) and kept in `tree`, one level per parameter, where the fast
  -- code looks them up: tree[args[2]][args[3]]...
  function M.fast_parse(tree, args, count, ranges, prepare)
    local node = tree
    for i = 2, count do
      local next_node = node[args[i]]
      if not next_node then
        next_node = {}
        node[args[i]] = next_node
      end
      node = next_node
    end
    local v, p = {}, true
    for i = 1, count do
      local n = plain(args[i + 1])
      if not n or n < ranges[i][2] or n > ranges[i][3] then
        p = false
      end
      v[i] = n
    end
    p = p and prepare(v[1], v[2], v[3]) or false
    node[args[count + 1]] = p
    forget_if_full()
    return p
  end

  -- A new tree of parameters, for a command's fast code, which looks a call's parameters up
  -- as ((tree[args[2]] or EMPTY)[args[3]] or EMPTY)[args[4]].
  function M.fast_tree()
    local tree = {}
    TREES[#TREES + 1] = tree
    return tree
  end

  -- The fast code's reply: one table, filled by every call (the server has read it before
  -- the next call), so that no call leaves a table for the collector to free.
  M.FAST_REPLY = {}

  -- Redis before 7.2 formats a number given as a command argument with printf's %.17g
  -- (costly); Valkey with a fast conversion of its own. `%d` text is cheaper than the first
  -- and dearer than the second: the fast code sends text where this is true.
  M.FAST_TEXT = (redis.REDIS_VERSION_NUM or 0) < 0x070200
  -- Redis before 7.2 hashes every byte of each string its Lua makes (GETRANGE's reply, a
  -- substring, a concatenation: about 7 server instructions a byte), so a change of a few
  -- bytes costs it less as small writes in place (SETRANGE, APPEND, PEXPIREAT) than as a
  -- whole new value built in Lua. On Valkey a call from Lua costs more (about 5,800
  -- instructions, through the module API) and the hash less, and one SET measured cheaper
  -- (scripts/twin_instructions.py).
  M.IN_PLACE = M.FAST_TEXT
  M.FAST_SLACK = M.TTL_SLACK_MS

  -- The exact quotient of integers below 2^52, rounded up (a / b rounds; one step corrects it).
  function M.cdiv(a, b)
    local q = floor(a / b)
    if q * b < a then
      return q + 1
    end
    return q
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/token_bucket.lua
  -- Token bucket (core/src/token_bucket.rs): level in units of 1/(refill_ms x 1000) token.

  M.TB = { tag = "T" }
  M.ALGO.T = M.TB

  function M.TB.parse(args, i)
    local v, nxt = M.positional("T", args, i)
    local p = { capacity = v[1], rate = v[2], refill_ms = v[3] }
    p.unit = p.refill_ms * 1000
    p.full = M.bmul(p.capacity, p.unit)
    return p, nxt
  end

  -- After every argument is parsed (the module's errors come first).
  function M.TB.finish(p)
    M.exact_wait(p.capacity, p.refill_ms, p.rate, "capacity x refill_ms / refill_tokens")
    return p
  end

  function M.TB.read(key)
    local v, f = M.read_fixed(key, "T", { 64, false, 128 })
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
    -- A level that is a number (below 2^53) is over the most only if that is below 2^53 too,
    -- where the double product is exact.
    local over
    if type(s.level) == "number" then
      over = s.level > M.MAX_COUNT * s.refill_ms * 1000
    else
      over = M.bcmp(s.level, M.bmul(M.MAX_COUNT, s.refill_ms * 1000)) > 0
    end
    if over then
      M.corrupt("T")
    end
    return s
  end

  -- Version 2 stores the instant in us since 2020-01-01 (src/encoding/token_bucket.rs
  -- `EPOCH_US`), wrapping modulo 2^64 below it (a varint of at most 64 bits, as the module
  -- reads it): the instant, or nil beyond the twin's range.
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
    if type(s.level) == "number" then
      return M.fixed_v1("T", s.updated_at, s.refill_ms, s.level, 0)
    end
    local since = s.updated_at - M.TB_EPOCH_US
    if since < 0 then
      since = M.bsub(M.badd(M.U64_MAX, 1), M.TB_EPOCH_US - s.updated_at)
    end
    return M.compact("T", { since, s.refill_ms, s.level })
  end

  function M.tb_level_at(s, now, p)
    if not s then
      return p.full, now
    end
    local level = s.level
    if s.refill_ms ~= p.refill_ms then
      local old_unit = s.refill_ms * 1000
      level = M.bmin(level, M.bmul(M.MAX_COUNT, old_unit))
      local q, r = M.bdivmod(level, old_unit)
      level = M.badd(M.bmul(q, p.unit), M.bdiv(M.bmul(r, p.unit), old_unit))
    end
    local as_of = now > s.updated_at and now or s.updated_at
    local refilled = M.badd(level, M.bmul(p.rate, as_of - s.updated_at))
    return M.bmin(refilled, p.full), as_of
  end

  -- Milliseconds until the level grows from `from` to `target` (rounded up), `lag` us late.
  local function tb_wait(p, target, from, lag)
    return M.ceil_millis(M.badd(M.bdivceil(M.bsub(target, from), p.rate), lag))
  end

  local function tb_decide(p, allowed, retry, after, lag)
    return M.decision(allowed, p.capacity, M.bnum(M.bdiv(after, p.unit)), retry, tb_wait(p, p.full, after, lag))
  end

  function M.TB.check(s, now, p, cost)
    local level, as_of = M.tb_level_at(s, now, p)
    local lag = as_of - now
    if cost > p.capacity then
      return tb_decide(p, false, -1, level, lag)
    end
    local need = M.bmul(cost, p.unit)
    if M.bcmp(level, need) < 0 then
      return tb_decide(p, false, tb_wait(p, need, level, lag), level, lag)
    end
    local after = M.bsub(level, need)
    local new
    if cost > 0 then
      new = { level = after, updated_at = as_of, refill_ms = p.refill_ms }
    end
    return tb_decide(p, true, 0, after, lag), new
  end

  function M.TB.refund(s, now, p, amount)
    local level, as_of = M.tb_level_at(s, now, p)
    local refunded = M.at_most(M.bnum(M.bdivceil(M.bsub(p.full, level), p.unit)), amount)
    if refunded == 0 then
      return 0
    end
    local new_level = M.bmin(M.badd(level, M.bmul(refunded, p.unit)), p.full)
    return refunded, { level = new_level, updated_at = as_of, refill_ms = p.refill_ms }
  end

  -- RL.STATE's fields (core/src/token_bucket.rs `view`).
  function M.TB.view(s)
    return {
      "refill_ms", s.refill_ms,
      "tokens_at_update", M.bnum(M.bdiv(s.level, s.refill_ms * 1000)),
      "updated_at_ms", M.idiv(s.updated_at, 1000),
    }
  end

  -- The fast path (see fast.lua) of `RL.TOKENBUCKET key capacity refill_tokens refill_ms
  -- [COST n]`: M.TB.check on numbers, for a full level (capacity x refill_ms x 1000) below
  -- 2^52, in one function (a Lua call costs about as much as ten lines of arithmetic).
  local function tb_prepare(capacity, rate, refill_ms)
    local unit = refill_ms * 1000
    local full = capacity * unit
    return full < M.FAST_MAX and { capacity, rate, refill_ms, unit, full, M.MAX_COUNT * unit }
  end
  local TB_TREE, TB_RANGES = M.fast_tree(), M.KINDS.T.params
  local TB_HEAD, TB_LEN, TB_FORMAT = sunpack("<I5", "\0RL\1T"), M.V1_LEN.T, "<I5I8I8I8I8"
  local FAST_MAX = M.FAST_MAX
  local REPLY = M.FAST_REPLY

  M.FAST_DIRECT["RL.TOKENBUCKET"] = function(key, args)
    local n, cost = #args, 1
    if n == 6 and args[5] == "COST" then
      cost = M.FAST_VALUES[args[6]] or M.fast_value(args[6])
    elseif n ~= 4 then
      return nil
    end
    local p = ((TB_TREE[args[2]] or EMPTY)[args[3]] or EMPTY)[args[4]]
    if p == nil then
      p = M.fast_parse(TB_TREE, args, 3, TB_RANGES, tb_prepare)
    end
    if not p or not cost then
      return nil
    end
    local capacity, rate, refill_ms, unit, full = p[1], p[2], p[3], p[4], p[5]
    local level, updated = full, nil
    -- The key and the clock read inline (a Lua call costs about as much as ten lines of arithmetic), every
    -- server call through redis.pcall (M.FAST_DIRECT): a failed read is a table, which
    -- matches no value's length below.
    local v = pcall_redis("GETRANGE", key, "0", "44")
    if v == "" and pcall_redis("EXISTS", key) ~= 0 then
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
    if #v == TB_LEN then
      local head, ms, top
      head, updated, ms, level, top = sunpack(TB_FORMAT, v)
      -- The stored instant below 2^52 us, the same refill_ms, a level below 2^52 and not
      -- over the most (else the general path: rescaling, bignums, the corrupt error). Each
      -- field is read whole as a double: one over 2^53 is rounded, but to no less than 2^53
      -- (rounding keeps the order), so the bounds below refuse it as they refuse it exact.
      if head ~= TB_HEAD or updated >= FAST_MAX or ms ~= refill_ms or level >= FAST_MAX or top ~= 0
        or level > p[6] then
        return nil
      end
    elseif v ~= "" then
      return nil
    end
    local as_of = now
    if updated then
      if updated > now then
        as_of = updated
      end
      local added = rate * (as_of - updated) -- rounded only when far above what is missing
      level = added >= full - level and full or level + added
    end
    local lag = as_of - now
    local need = cost * unit
    local gap = full - level
    if cost > capacity or level < need then
      -- Denied: the waits and the tokens left computed here, on no
      -- call, each quotient by `/` corrected by one step.
      local retry = -1
      if cost <= capacity then
        local short = need - level
        local w = short / rate
        w = w - w % 1
        w = (w * rate < short and w + 1 or w) + lag
        retry = w / 1000
        retry = retry - retry % 1
        retry = retry * 1000 < w and retry + 1 or retry
      end
      local w = gap / rate
      w = w - w % 1
      w = (w * rate < gap and w + 1 or w) + lag
      local reset = w / 1000
      reset = reset - reset % 1
      local left = level / unit
      left = left - left % 1
      REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 0, capacity, left * unit > level and left - 1 or left, retry,
        reset * 1000 < w and reset + 1 or reset
      return REPLY
    end
    -- Allowed: the reset computed here, on no call.
    level = level - need
    gap = gap + need
    local w = gap / rate
    w = w - w % 1
    w = (w * rate < gap and w + 1 or w) + lag
    local reset = w / 1000
    reset = reset - reset % 1
    reset = reset * 1000 < w and reset + 1 or reset
    if cost > 0 then
      local at = now / 1000
      at = at - at % 1
      at = (at * 1000 < now and at + 1 or at) + reset + M.FAST_SLACK
      if pcall_redis("SET", key, spack(TB_FORMAT, TB_HEAD, as_of, refill_ms, level, 0), "PXAT",
        M.FAST_TEXT and fmt("%d", at) or at).err then
        return nil
      end
    end
    local left = level / unit
    left = left - left % 1
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 1, capacity, left * unit > level and left - 1 or left, 0, reset
    return REPLY
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/sliding_window.lua
  -- Sliding window counter (core/src/sliding_window.rs).

  M.SW = M.window_algorithm("S")

  function M.SW.read(key)
    local v, f = M.read_window(key, "S", { false, false, false, false })
    if not v then
      return nil
    end
    local s
    if f then
      s = { window_ms = f[1], window_start = f[2], previous = f[3], current = f[4] }
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
    return M.fixed_v1("S", s.window_ms, s.window_start, s.previous, s.current)
  end

  -- The stored counts seen from the window starting `gone` us after the stored one (`window`
  -- us long): both in the same window, the current one as the previous in the next, none later.
  local function sw_counts(s, gone, window)
    if gone == 0 then
      return s.previous, s.current
    elseif gone == window then
      return s.current, 0
    end
    return 0, 0
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
      local previous, current = sw_counts(s, old_start - stored_start, old)
      local elapsed = at - old_start
      local estimate = M.bdivceil(M.badd(M.bmul(previous, old - elapsed), M.bmul(current, old)), old)
      return { start = at - M.imod(at, window), at = at, previous = 0, current = M.bnum(estimate) }
    end
    local start = at - M.imod(at, window)
    local previous, current = sw_counts(s, start - stored_start, window)
    return { start = start, at = at, previous = previous, current = current }
  end

  function M.sw_earliest_allowed(v, cost, p)
    local window, limit = p.window, p.limit
    if v.previous > 0 then
      local spare = limit - (v.current + cost)
      if spare >= 0 then
        local part = M.bnum(M.bdiv(M.bmul(spare, window), v.previous))
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
      local part = M.bnum(M.bdiv(M.bmul(limit - cost, window), v.current))
      decay_needed = window - (part < window and part or window)
    end
    return next_start + decay_needed
  end

  function M.SW.check(s, now, p, cost)
    local v = M.sw_view(s, now, p)
    local window = p.window
    local budget = M.bmul(p.limit, window)
    local used = M.badd(M.bmul(v.previous, window - (v.at - v.start)), M.bmul(v.current, window))
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
    local after = M.badd(used, M.bmul(cost, window))
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

  -- RL.STATE's fields: the weighted count now, rounded up (core/src/sliding_window.rs `view`).
  function M.SW.view(s, now)
    local max = M.MAX_COUNT
    local p = { limit = max, window_ms = s.window_ms, window = s.window_ms * 1000 }
    local d = M.SW.check(s, now, p, 0)
    return {
      "window_ms", s.window_ms,
      "window_start_ms", s.window_start,
      "previous", s.previous,
      "current", s.current,
      "count", max - d.remaining,
    }
  end

  -- The fast path (see fast.lua) of `RL.SLIDING key limit window_ms [COST n]`: M.SW.check on
  -- numbers, for the same window as stored and a previous window's weight (previous x its
  -- remaining us) below 2^52. The budget (limit x window us) may pass 2^53, so the code
  -- compares counts instead: remaining = limit - current - ceil(weight / window).
  local SW_HEAD, SW_LEN, SW_FORMAT = sunpack("<I5", "\0RL\1S"), M.V1_LEN.S, "<I5I8I8I8I8"
  local SW_TREE, SW_RANGES = M.fast_tree(), M.KINDS.S.params
  local REPLY, VALUES = M.FAST_REPLY, M.FAST_VALUES
  local function sw_prepare(limit, window_ms)
    return { limit, window_ms, window_ms * 1000 }
  end

  -- The wait of a denial (M.sw_earliest_allowed, then since now, at least 1 ms), or nil for
  -- the general path (a product past 2^52).
  local function sw_retry(limit, w, start, at, previous, current, cost, now)
    local earliest
    local spare = limit - (current + cost)
    if previous > 0 and spare >= 0 then
      if spare >= previous then
        earliest = at
      elseif spare * w >= M.FAST_MAX then
        return nil
      else
        -- A quotient rounded down, by `/` corrected by one step (inline, as the others below: a Lua call costs more than these lines).
        local product = spare * w
        local part = product / previous
        part = part - part % 1
        if part * previous > product then
          part = part - 1
        end
        if part > 0 then
          earliest = start + w - part
          earliest = earliest > at and earliest or at
        end
      end
    end
    if not earliest then
      earliest = start + w
      if current > 0 and limit - cost < current then
        if (limit - cost) * w >= M.FAST_MAX then
          return nil
        end
        local product = (limit - cost) * w
        local part = product / current
        part = part - part % 1
        if part * current > product then
          part = part - 1
        end
        earliest = earliest + w - part
      end
    end
    if earliest <= now then
      return 1
    end
    local retry = (earliest - now) / 1000
    retry = retry - retry % 1
    retry = retry * 1000 < earliest - now and retry + 1 or retry
    return retry > 1 and retry or 1
  end

  M.FAST_DIRECT["RL.SLIDING"] = function(key, args)
    -- `key a b [COST n]` parsed inline (a Lua call costs about as much as ten lines of arithmetic).
    local n, cost = #args, 1
    if n == 5 and args[4] == "COST" then
      cost = VALUES[args[5]] or M.fast_value(args[5])
    elseif n ~= 3 then
      return nil
    end
    local p = (SW_TREE[args[2]] or EMPTY)[args[3]]
    if p == nil then
      p = M.fast_parse(SW_TREE, args, 2, SW_RANGES, sw_prepare)
    end
    if not p or not cost then
      return nil
    end
    local limit, window_ms, w = p[1], p[2], p[3]
    -- The key and the clock read inline (a Lua call costs about as much as ten lines of arithmetic), every
    -- server call through redis.pcall (M.FAST_DIRECT): a failed read is a table, which
    -- matches no value's length below.
    local v = pcall_redis("GETRANGE", key, "0", "45")
    if v == "" and pcall_redis("EXISTS", key) ~= 0 then
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
    local stored_ms, stored_start, previous, current
    if #v == SW_LEN then
      local head
      head, stored_ms, stored_start, previous, current = sunpack(SW_FORMAT, v)
      -- As M.SW.read checks it, and the same window (else the general path).
      if head ~= SW_HEAD or stored_ms ~= window_ms or stored_start * 1000 > M.LATEST_US
        or stored_start % stored_ms ~= 0 or previous > M.MAX_COUNT or current > M.MAX_COUNT then
        return nil
      end
    elseif v ~= "" then
      return nil
    end
    local at = now
    local start
    if stored_start then
      stored_start = stored_start * 1000
      if stored_start > at then
        at = stored_start
      end
      start = at - at % w
      local gone = start - stored_start
      if gone == w then
        previous, current = current, 0
      elseif gone ~= 0 then
        previous, current = 0, 0
      end
    else
      start, previous, current = now - now % w, 0, 0
    end
    local weight = previous * (w - (at - start))
    if weight >= M.FAST_MAX then
      return nil
    end
    local carried = weight / w
    carried = carried - carried % 1
    carried = carried * w < weight and carried + 1 or carried
    local allowed = cost <= limit and weight <= (limit - current - cost) * w
    local retry = 0
    if allowed then
      current = current + cost
    elseif cost > limit then
      retry = -1
    else
      retry = sw_retry(limit, w, start, at, previous, current, cost, now)
      if not retry then
        return nil
      end
    end
    local idle = current > 0 and start + 2 * w or previous > 0 and start + w or 0
    local reset = 0
    if idle > now then
      reset = (idle - now) / 1000
      reset = reset - reset % 1
      reset = reset * 1000 < idle - now and reset + 1 or reset
    end
    if allowed and cost > 0 then
      local pxat = now / 1000
      pxat = pxat - pxat % 1
      pxat = (pxat * 1000 < now and pxat + 1 or pxat) + reset + M.TTL_SLACK_MS
      if pcall_redis("SET", key, spack(SW_FORMAT, SW_HEAD, window_ms, start / 1000, previous, current), "PXAT",
        M.FAST_TEXT and fmt("%d", pxat) or pxat).err then
        return nil
      end
    end
    local remaining = limit - current - carried
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = allowed and 1 or 0, limit, remaining > 0 and remaining or 0, retry, reset
    return REPLY
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/fixed_window.lua
  -- Fixed window counter (core/src/fixed_window.rs).

  M.FW = M.window_algorithm("F")

  function M.FW.read(key)
    local v, f = M.read_window(key, "F", { false, false, false })
    if not v then
      return nil
    end
    local s
    if f then
      s = { window_ms = f[1], window_start = f[2], count = f[3] }
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
    return M.fixed_v1("F", s.window_ms, s.window_start, s.count)
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

  -- A count of `n` in a window ending at `end_us` (core/src/fixed_window.rs, which the
  -- calendar quota shares): the decision for `cost` and the count to write (nil: none).
  function M.window_count_check(limit, now, end_us, n, cost)
    local until_end = end_us > now and M.ceil_div(end_us - now, 1000) or 0
    local function decide(allowed, retry, after)
      local remaining = limit > after and limit - after or 0
      return M.decision(allowed, limit, remaining, retry, after > 0 and until_end or 0)
    end
    if cost > limit then
      return decide(false, -1, n)
    end
    local after = n + cost
    if after > limit then
      return decide(false, until_end, n)
    end
    return decide(true, 0, after), cost > 0 and after or nil
  end

  function M.FW.check(s, now, p, cost)
    local start, n = M.fw_current(s, now, p.window_ms)
    local d, count = M.window_count_check(p.limit, now, (start + p.window_ms) * 1000, n, cost)
    return d, count and { window_ms = p.window_ms, window_start = start, count = count }
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

  -- RL.STATE's fields (core/src/fixed_window.rs `view`).
  function M.FW.view(s, now)
    local _, n = M.fw_current(s, now, s.window_ms)
    return { "window_ms", s.window_ms, "window_start_ms", s.window_start, "count", n }
  end

  -- The fast path (see fast.lua) of `RL.FIXED key limit window_ms [COST n]`: M.FW.check on
  -- numbers (all below 2^53 for every parameter).
  local FW_HEAD, FW_LEN, FW_FORMAT = sunpack("<I5", "\0RL\1F"), M.V1_LEN.F, "<I5I8I8I8"
  local FW_TREE, FW_RANGES = M.fast_tree(), M.KINDS.F.params
  local REPLY, VALUES = M.FAST_REPLY, M.FAST_VALUES
  local function fw_prepare(limit, window_ms)
    return { limit, window_ms }
  end

  M.FAST_DIRECT["RL.FIXED"] = function(key, args)
    -- `key a b [COST n]` parsed inline (a Lua call costs about as much as ten lines of arithmetic).
    local n, cost = #args, 1
    if n == 5 and args[4] == "COST" then
      cost = VALUES[args[5]] or M.fast_value(args[5])
    elseif n ~= 3 then
      return nil
    end
    local p = (FW_TREE[args[2]] or EMPTY)[args[3]]
    if p == nil then
      p = M.fast_parse(FW_TREE, args, 2, FW_RANGES, fw_prepare)
    end
    if not p or not cost then
      return nil
    end
    local limit, window_ms = p[1], p[2]
    -- The key and the clock read inline (a Lua call costs about as much as ten lines of arithmetic), every
    -- server call through redis.pcall (M.FAST_DIRECT): a failed read is a table, which
    -- matches no value's length below.
    local v = pcall_redis("GETRANGE", key, "0", "35")
    if v == "" and pcall_redis("EXISTS", key) ~= 0 then
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
    local stored_ms, start, count
    if #v == FW_LEN then
      local head
      head, stored_ms, start, count = sunpack(FW_FORMAT, v)
      -- As M.FW.read checks it (else the general path names the corrupt value).
      if head ~= FW_HEAD or stored_ms < 1 or stored_ms > M.MAX_DURATION_MS or start * 1000 > M.LATEST_US
        or start % stored_ms ~= 0 or count > M.MAX_COUNT then
        return nil
      end
    elseif v ~= "" then
      return nil
    end
    local at = now / 1000
    at = at - at % 1
    local used = 0
    if start then
      if start > at then
        at = start
      end
      if at < start + stored_ms then
        used = count
      end
    end
    start = at - at % window_ms
    local until_end = (start + window_ms) * 1000 - now
    if until_end > 0 then
      local ms = until_end / 1000
      ms = ms - ms % 1
      until_end = ms * 1000 < until_end and ms + 1 or ms
    else
      until_end = 0
    end
    local after = used + cost
    if cost > limit or after > limit then
      REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] =
        0, limit, limit > used and limit - used or 0, cost > limit and -1 or until_end, used > 0 and until_end or 0
      return REPLY
    end
    if cost > 0 then
      at = now / 1000
      at = at - at % 1
      at = (at * 1000 < now and at + 1 or at) + until_end + M.TTL_SLACK_MS
      if pcall_redis("SET", key, spack(FW_FORMAT, FW_HEAD, window_ms, start, after), "PXAT",
        M.FAST_TEXT and fmt("%d", at) or at).err then
        return nil
      end
    end
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 1, limit, limit - after, 0, after > 0 and until_end or 0
    return REPLY
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/gcra.lua
  -- GCRA (core/src/gcra.rs): the arrival time in ticks of 1/limit us.

  M.GC = { tag = "G" }
  M.ALGO.G = M.GC

  function M.gcra_params(limit, period_ms, burst)
    return { limit = limit, period_ms = period_ms, burst = burst or limit, interval = period_ms * 1000 }
  end

  -- As a spec of RL.ALL or RL.REFUND: `limit period_ms [BURST b]`; as RL.GCRA, BURST is one
  -- of the options (`finish` gets it).
  function M.GC.parse(args, i, spec)
    local v
    v, i = M.positional("G", args, i)
    local burst
    if spec and args[i] and args[i]:upper() == "BURST" then
      local r = M.KINDS.G.options[1]
      if args[i + 1] == nil then
        M.fail("ERR option BURST needs a value: " .. M.range_text(r))
      end
      burst = M.integer(args[i + 1], r)
      i = i + 2
    end
    return M.gcra_params(v[1], v[2], burst), i
  end

  function M.GC.finish(p, given)
    if given and given.BURST then
      p.burst = given.BURST
    end
    M.exact_wait(p.burst, p.period_ms, p.limit, "burst x period_ms / limit")
    return p
  end

  -- The latest TAT (in us) of a valid state: u64::MAX plus the longest burst.
  M.GC.LATEST = M.badd(M.U64_MAX, M.bmul(M.MAX_COUNT, M.MAX_COUNT))

  function M.GC.read(key)
    local v, f = M.read_fixed(key, "G", { 128, false, false })
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
    if type(s.tat) ~= "number" and M.bcmp(M.bdiv(s.tat, s.limit), M.GC.LATEST) > 0 then
      M.corrupt("G")
    end
    return s
  end

  -- Version 1 whatever the arrival time (the fast path writes its 16 bytes from two halves).
  function M.GC.encode(s)
    return "\0RL\1G" .. M.u128_bytes(s.tat) .. spack("<I8I8", s.limit, s.period_ms)
  end

  function M.gcra_tat_in(s, limit)
    if s.limit == limit then
      return s.tat
    end
    local q, r = M.bdivmod(s.tat, s.limit)
    return M.bsat(M.badd(M.bsat(M.bmul(q, limit)), M.bdivceil(M.bmul(r, limit), s.limit)))
  end

  function M.GC.check(s, now, p, cost)
    local now_t = M.bmul(now, p.limit)
    local tat = M.bmax(s and M.gcra_tat_in(s, p.limit) or 0, now_t)
    local horizon = M.badd(now_t, M.bmul(p.burst, p.interval))
    local function to_millis(ticks)
      return M.ceil_millis(M.bdivceil(ticks, p.limit))
    end
    local function decide(allowed, retry, t)
      return M.decision(allowed, p.burst, M.bnum(M.bdiv(M.bsub(horizon, t), p.interval)), retry, to_millis(M.bsub(t, now_t)))
    end
    if cost > p.burst then
      return decide(false, -1, tat)
    end
    local after = M.bsat(M.badd(tat, M.bmul(cost, p.interval)))
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
    local now_t = M.bmul(now, p.limit)
    local tat = s and M.gcra_tat_in(s, p.limit) or 0
    local refunded = M.at_most(M.bnum(M.bdivceil(M.bsub(tat, now_t), p.interval)), amount)
    if refunded == 0 then
      return 0
    end
    local new_tat = M.bmax(M.bsub(tat, M.bmul(refunded, p.interval)), now_t)
    return refunded, { tat = new_tat, limit = p.limit, period_ms = p.period_ms }
  end

  -- RL.STATE's fields (core/src/gcra.rs `view`).
  function M.GC.view(s, now)
    local ahead = M.bsub(s.tat, M.bmul(now, s.limit))
    return {
      "limit", s.limit,
      "period_ms", s.period_ms,
      "tat_ms", M.ceil_millis(M.bdivceil(s.tat, s.limit)),
      "used", M.bnum(M.bdivceil(ahead, s.period_ms * 1000)),
    }
  end

  -- RL.THROTTLE key max_burst count period_s [quantity] (core/src/throttle.rs): redis-cell's
  -- CL.THROTTLE on the GCRA, on the same keys as RL.GCRA. Replies limited, max_burst + 1,
  -- remaining, retry_after_s (-1 when allowed or never possible), reset_after_s; waits
  -- rounded up to whole seconds.
  function M.run_throttle(name, args)
    local n = #args
    if #M.KEYS ~= 1 or n < 4 or n > 5 then
      M.arity(name)
    end
    local T = M.THROTTLE
    local max_burst = M.integer(args[2], T[1])
    local count = M.integer(args[3], T[2])
    local period_s = M.integer(args[4], T[3])
    local cost = n == 5 and M.integer(args[5], T[4]) or 1
    local p = M.GC.finish(M.gcra_params(count, period_s * 1000, max_burst + 1))
    local key = M.KEYS[1]
    local state = M.GC.read(key)
    local now = M.now_us()
    local d, new = M.GC.check(state, now, p, cost)
    M.check_exact(d)
    if new then
      M.write(key, M.GC.encode(new), now, d.reset)
    end
    local retry = -1
    if not d.allowed and d.retry >= 0 then
      retry = M.ceil_div(d.retry, 1000)
    end
    return { d.allowed and 0 or 1, d.limit, d.remaining, retry, M.ceil_div(d.reset, 1000) }
  end
  M.COMMANDS["RL.THROTTLE"] = M.run_throttle

  -- The fast path (see fast.lua) of RL.GCRA and RL.THROTTLE: M.GC.check on numbers. The
  -- arrival time (tat, in ticks of 1/limit us) outgrows a double at a few units per us, so
  -- the code works on its distance from now x limit, which stays below 2^51 for a burst x
  -- period_ms x 1000 below that: tat and now x limit are both split at 2^48 (the product
  -- from four exact products of 26-bit halves), and only their difference is a number.
  local GC_HEAD, GC_LEN, GC_FORMAT = sunpack("<I5", "\0RL\1G"), M.V1_LEN.G, "<I5I6I8I2I8I8"
  local TWO48, TWO26 = 281474976710656, 67108864
  local FAST_MAX, HALF_FAST, LONGEST = M.FAST_MAX, M.FAST_MAX / 2, M.MAX_DURATION_MS
  local SLACK, AS_TEXT = M.TTL_SLACK_MS, M.FAST_TEXT

  -- limit, period_ms, interval, the limit's 26-bit halves, RL.THROTTLE's burst (6), the last
  -- whole second (in us) seen (7; false before the first call) with its product by the limit
  -- split at 2^48 (8, 9), and whether the limit is below 2^33 (10), so that the product of up
  -- to 10^6 us by the limit is exact and 7-9 are used.
  local function gcra_prepare(limit, period_ms)
    local high = floor(limit / TWO26)
    return { limit, period_ms, period_ms * 1000, high, limit - high * TWO26, false, 0, 0, 0, limit < 8589934592 }
  end

  -- t x limit as x * 2^48 + y, y < 2^48 (t < 2^52): from four exact products of 26-bit halves.
  local function split_product(t, p)
    local nh = t / TWO26
    nh = nh - nh % 1
    local nl = t - nh * TWO26
    local b = nh * p[5] + nl * p[4]
    local c = nl * p[5]
    local bq = b / 4194304
    bq = bq - bq % 1
    local cq = c / TWO48
    cq = cq - cq % 1
    local y = (b - bq * 4194304) * TWO26 + (c - cq * TWO48)
    local x = nh * p[4] * 16 + bq + cq
    if y >= TWO48 then
      return x + 1, y - TWO48
    end
    return x, y
  end

  local function throttle_prepare(max_burst, count, period_s)
    local p = gcra_prepare(count, period_s * 1000)
    p[6] = max_burst + 1
    return p
  end
  local GC_TREE, TH_TREE, GC_RANGES = M.fast_tree(), M.fast_tree(), M.KINDS.G.params
  local VALUES = M.FAST_VALUES
  local REPLY = M.FAST_REPLY

  -- `RL.GCRA key limit period_ms [BURST b] [COST n]` (options in either order) and
  -- `RL.THROTTLE key max_burst count period_s [quantity]`, in one function (a Lua call costs
  -- about as much as ten lines of arithmetic).
  local function gcra_fast(key, args)
    local n = #args
    local throttle = args[1] == "RL.THROTTLE"
    local p, burst, cost
    if throttle then
      if n == 5 then
        cost = VALUES[args[5]] or M.fast_value(args[5])
      elseif n ~= 4 then
        return nil
      end
      p = ((TH_TREE[args[2]] or EMPTY)[args[3]] or EMPTY)[args[4]]
      if p == nil then
        p = M.fast_parse(TH_TREE, args, 3, M.THROTTLE, throttle_prepare)
      end
      burst = p and p[6]
    elseif n == 5 and args[4] == "BURST" then
      burst = VALUES[args[5]] or M.fast_value(args[5])
    elseif n ~= 3 then
      for i = 4, n, 2 do
        local word = args[i]
        if word == "BURST" and burst == nil and i < n then
          burst = M.fast_value(args[i + 1])
        elseif word == "COST" and cost == nil and i < n then
          cost = M.fast_value(args[i + 1])
        else
          return nil
        end
      end
    end
    if not throttle then
      p = (GC_TREE[args[2]] or EMPTY)[args[3]]
      if p == nil then
        p = n >= 3 and M.fast_parse(GC_TREE, args, 2, GC_RANGES, gcra_prepare)
      end
      if burst == nil then
        burst = p and p[1]
      end
    end
    if not p or not burst or burst == 0 or cost == false then
      return nil
    end
    cost = cost or 1
    local limit, period_ms, interval = p[1], p[2], p[3]
    local span = burst * interval
    if span >= HALF_FAST then
      return nil
    end
    -- The key and the clock read inline (a Lua call costs about as much as ten lines of arithmetic), every
    -- server call through redis.pcall (M.FAST_DIRECT): a failed read is a table, which
    -- matches no value's length below.
    local v = pcall_redis("GETRANGE", key, "0", "44")
    if v == "" and pcall_redis("EXISTS", key) ~= 0 then
      return nil
    end
    local t = pcall_redis("TIME")
    if t.err then
      return nil
    end
    if t[1] ~= clock_s then
      clock_s, clock_us = t[1], t[1] * 1000000
    end
    local second = clock_us
    local now = second + t[2]
    local low, high, top, stored_limit, stored_period
    if #v == GC_LEN then
      local head
      head, low, high, top, stored_limit, stored_period = sunpack(GC_FORMAT, v)
      if head ~= GC_HEAD or top ~= 0 or high >= FAST_MAX or stored_limit ~= limit
        or stored_period < 1 or stored_period > LONGEST then
        return nil
      end
    elseif v ~= "" then
      return nil
    end
    -- now x limit = x * 2^48 + y, y < 2^48: the whole second's product (once a second), plus
    -- the microseconds' (exact below 2^53).
    local x, y
    if p[10] then
      if p[7] ~= second then
        p[8], p[9] = split_product(second, p)
        p[7] = second
      end
      y = p[9] + (now - second) * limit
      x = y / TWO48
      x = x - x % 1
      y, x = y - x * TWO48, x + p[8]
    else
      x, y = split_product(now, p)
    end
    if x >= FAST_MAX then
      return nil
    end
    -- The stored tat's distance ahead of now x limit (0 when behind it, or missing).
    local d = 0
    if low then
      local ahead = high - x
      if ahead > 8 then
        return nil
      elseif ahead >= -1 then
        d = ahead * TWO48 + (low - y)
        if d < 0 then
          d = 0
        elseif d >= HALF_FAST then
          return nil
        end
      end
    end
    local retry, after = 0, d + cost * interval
    if cost > burst then
      retry, after = -1, d
    elseif after > span then
      -- ceil(ceil((after - span) / limit) / 1000) ms, as the reset below (no call).
      local over = after - span
      local us = over / limit
      us = us - us % 1
      us = us * limit < over and us + 1 or us
      retry = us / 1000
      retry = retry - retry % 1
      retry, after = retry * 1000 < us and retry + 1 or retry, d
    end
    -- reset: ceil(ceil(after / limit) / 1000) ms, each quotient rounded by `/` and corrected.
    local us = after / limit
    us = us - us % 1
    us = us * limit < after and us + 1 or us
    local reset = us / 1000
    reset = reset - reset % 1
    reset = reset * 1000 < us and reset + 1 or reset
    if retry == 0 and cost > 0 then
      local z = y + after
      local carry = z / TWO48
      carry = carry - carry % 1
      local at = now / 1000
      at = at - at % 1
      at = (at * 1000 < now and at + 1 or at) + reset + SLACK
      if pcall_redis("SET", key, spack(GC_FORMAT, GC_HEAD, z - carry * TWO48, x + carry, 0, limit, period_ms), "PXAT",
        AS_TEXT and fmt("%d", at) or at).err then
        return nil
      end
    end
    -- Below 2^53, floor(a / b) of `/` is exact.
    local remaining = span > after and (span - after) / interval or 0
    remaining = remaining - remaining % 1
    if throttle then
      -- Waits in whole seconds, rounded up.
      local reset_s = reset / 1000
      reset_s = reset_s - reset_s % 1
      reset_s = reset_s * 1000 < reset and reset_s + 1 or reset_s
      local retry_s = -1
      if retry > 0 then
        retry_s = retry / 1000
        retry_s = retry_s - retry_s % 1
        retry_s = retry_s * 1000 < retry and retry_s + 1 or retry_s
      end
      REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = retry == 0 and 0 or 1, burst, remaining, retry_s, reset_s
      return REPLY
    end
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = retry == 0 and 1 or 0, burst, remaining, retry, reset
    return REPLY
  end
  M.FAST_DIRECT["RL.GCRA"] = gcra_fast
  M.FAST_DIRECT["RL.THROTTLE"] = gcra_fast

  -- ------------------------------------------------------------------------------------------
  -- lua/src/sliding_window_log.lua
  -- Sliding window log (core/src/sliding_log.rs): entries oldest first. The module writes
  -- version 1 (varints: small); the twin writes version 3 (src/encoding/sliding_log.rs):
  -- `window_ms` (8 bytes), the running count before the first entry (3), then per entry its
  -- instant (7) and the running count through it (3), little-endian. Its fast code reads
  -- and drops entries at computed offsets (a constant number of Lua operations per call),
  -- and the units in the window are two running counts apart, so a call that drops nothing
  -- appends 10 bytes and leaves the rest as it is: no total to rewrite in front. Version 2
  -- (the twin's earlier layout: a total, then instants and counts) is still read. Each side
  -- reads every version.

  M.LG = M.window_algorithm("L")
  M.MAX_LOG = M.KINDS.L.params[1][3]
  local LG_HEAD = sunpack("<I5", "\0RL\3L")
  -- Running counts stay below 2^24 (3 bytes): a call that would reach it leaves the write to
  -- the general path, whose log starts again from 0.
  local RUN_END = 16777216

  -- A version 2 log's entries (nil when not a valid one).
  local function read_fixed_log(v)
    local len = #v
    if len < 15 or (len - 15) % 10 ~= 0 then
      return nil
    end
    local window_ms, total = M.read_u64(v, 6), sunpack("<I2", v, 14)
    if not M.valid_duration(window_ms) or total > M.MAX_LOG then
      return nil
    end
    local times, counts, previous, sum = {}, {}, 0, 0
    for pos = 16, len, 10 do
      local at, n = M.read_u64(v, pos), sunpack("<I2", v, pos + 8)
      if not at or at > M.LATEST_US or at < previous or n == 0 then
        return nil
      end
      previous, sum = at, sum + n
      times[#times + 1] = at
      counts[#counts + 1] = n
    end
    return sum == total and { window_ms = window_ms, times = times, counts = counts }
  end

  -- A version 3 log's entries (nil when not a valid one).
  local function read_running_log(v)
    local len = #v
    if len < 16 or (len - 16) % 10 ~= 0 then
      return nil
    end
    local window_ms, base = M.read_u64(v, 6), sunpack("<I3", v, 14)
    if not M.valid_duration(window_ms) then
      return nil
    end
    local times, counts, previous, run = {}, {}, 0, base
    for pos = 17, len, 10 do
      local at, through = sunpack("<I7I3", v, pos)
      if at > M.LATEST_US or at < previous or through <= run or through - base > M.MAX_LOG then
        return nil
      end
      times[#times + 1] = at
      counts[#counts + 1] = through - run
      previous, run = at, through
    end
    return { window_ms = window_ms, times = times, counts = counts }
  end

  function M.LG.read(key)
    local v = M.read_value(key, "L")
    if not v then
      return nil
    end
    if byte(v, 4) == 3 then
      return read_running_log(v) or M.corrupt("L")
    end
    if byte(v, 4) == 2 then
      return read_fixed_log(v) or M.corrupt("L")
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
    local parts, run = {}, 0
    for i = 1, #s.times do
      run = run + s.counts[i]
      parts[i + 1] = spack("<I7I3", s.times[i], run)
    end
    parts[1] = spack("<I5I8I3", LG_HEAD, s.window_ms, 0)
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

  -- RL.STATE's fields (core/src/sliding_log.rs `view`).
  function M.LG.view(s, now)
    local n, count = #s.times, 0
    local window = s.window_ms * 1000
    local at = n > 0 and s.times[n] > now and s.times[n] or now
    for i = 1, n do
      if s.times[i] + window > at then
        count = count + s.counts[i]
      end
    end
    return {
      "window_ms", s.window_ms,
      "count", count,
      "entries", n,
      "oldest_at_ms", n > 0 and M.idiv(s.times[1], 1000) or 0,
      "newest_at_ms", n > 0 and M.idiv(s.times[n], 1000) or 0,
    }
  end

  -- The fast path (see fast.lua) of `RL.LOG key limit window_ms [COST n]`: M.LG.check on a
  -- missing key or a version 3 log of the same window, in one function. The entries that
  -- left the window are read from the front and dropped with a substring; the units still
  -- in it are the newest running count less the last one dropped; a denial reads entries
  -- from the front until enough units would leave; a write appends one entry (or raises
  -- the newest's running count at the same instant). The fast code checks the header, the
  -- length and the entries it reads (the general path checks every entry).
  local function lg_prepare(limit, window_ms)
    return window_ms * 1000 < M.FAST_MAX and { limit, window_ms, window_ms * 1000 }
  end
  local LG_TREE, LG_RANGES = M.fast_tree(), M.KINDS.L.params
  -- The longest valid version 3 log, and GETRANGE's last offset: one byte more, so a
  -- longer value is seen as such.
  local LG_LONGEST = 16 + 10 * M.MAX_LOG
  local LG_LAST = fmt("%d", LG_LONGEST)
  local FAST_MAX = M.FAST_MAX
  local VALUES, REPLY = M.FAST_VALUES, M.FAST_REPLY
  local FAST_TEXT, FAST_SLACK, MAX_LOG = M.FAST_TEXT, M.FAST_SLACK, M.MAX_LOG
  local LG_ENTRY = "<I7I3"
  -- A function's globals are looked up through the library's environment: a local is cheaper.
  local type = type

  M.FAST_DIRECT["RL.LOG"] = function(key, args)
    -- `key a b [COST n]` parsed inline (a Lua call costs about as much as ten lines of arithmetic).
    local n, cost = #args, 1
    if n == 5 and args[4] == "COST" then
      cost = VALUES[args[5]] or M.fast_value(args[5])
    elseif n ~= 3 then
      return nil
    end
    local p = (LG_TREE[args[2]] or EMPTY)[args[3]]
    if p == nil then
      p = M.fast_parse(LG_TREE, args, 2, LG_RANGES, lg_prepare)
    end
    if not p or not cost then
      return nil
    end
    local limit, window_ms, window = p[1], p[2], p[3]
    -- The key and the clock read inline, every server call through redis.pcall: a failed
    -- read (WRONGTYPE) is a table, of length 0 but not "".
    local v = pcall_redis("GETRANGE", key, "0", LG_LAST)
    local len = #v
    if len == 0 and (v ~= "" or pcall_redis("EXISTS", key) ~= 0) then
      return nil
    end
    local t = pcall_redis("TIME")
    local s, us = t[1], t[2]
    if not us then
      return nil -- an error reply
    end
    if s ~= clock_s then
      clock_s, clock_us = s, s * 1000000
    end
    local now = clock_us + us
    -- `gone`: the running count before the oldest entry still in the window; `run`: the
    -- running count through the newest entry.
    local pos, gone, run, newest = 17, 0, 0, nil
    local at = now
    if len > 16 then
      if len > LG_LONGEST or (len - 16) % 10 ~= 0 then
        return nil
      end
      -- The header and, in the same unpack, the oldest entry (e, r); the newest from the end.
      local head, stored_ms, e, r
      head, stored_ms, gone, e, r = sunpack("<I5I8I3I7I3", v)
      if head ~= LG_HEAD or stored_ms ~= window_ms then
        return nil
      end
      local last = e
      run = r
      if len > 26 then
        last, run = sunpack(LG_ENTRY, v, len - 9)
      end
      if last >= FAST_MAX or last < e or run < r or run - gone > MAX_LOG then
        return nil
      end
      if last > now then
        at = last
      end
      -- The entries that left the window: their units are no longer used.
      local previous = 0
      while e + window <= at do
        if e < previous or r <= gone then
          return nil
        end
        previous, gone, pos = e, r, pos + 10
        if pos > len then
          break
        end
        e, r = sunpack(LG_ENTRY, v, pos)
      end
      if pos < len then
        if r <= gone then
          return nil
        end
        newest = last
      end
    elseif len > 0 then
      if len ~= 16 then
        return nil
      end
      local head, stored_ms
      head, stored_ms, gone = sunpack("<I5I8I3", v)
      if head ~= LG_HEAD or stored_ms ~= window_ms then
        return nil
      end
      run = gone
    end
    local used = run - gone
    local left = limit - used
    if cost > limit or used + cost > limit or cost == 0 then
      -- Denied, or a COST 0 call: nothing is written.
      local reset = newest and M.cdiv(newest + window - now, 1000) or 0
      if cost == 0 and left >= 0 then
        REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 1, limit, left, 0, reset
        return REPLY
      end
      local retry = -1
      if cost <= limit then
        -- The oldest entries whose units, once out of the window, let the call in.
        local excess = used + cost - limit
        local i, e, r, previous = pos, 0, gone, gone
        while r - gone < excess and i < len do
          e, r = sunpack(LG_ENTRY, v, i)
          if r <= previous then
            return nil
          end
          previous, i = r, i + 10
        end
        if r - gone < excess then
          return nil
        end
        retry = e + window > now and M.cdiv(e + window - now, 1000) or 0
      end
      REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 0, limit, left > 0 and left or 0, retry, reset
      return REPLY
    end
    local through = run + cost
    if through >= RUN_END then
      return nil
    end
    -- Allowed: the reset (M.cdiv) and the key's expiry (the PXAT instant) computed here, on no
    -- call: the window from the new entry (the whole window when the clock did not go back),
    -- and the instant rounded up to a millisecond.
    local reset = window_ms
    if at ~= now then
      local gap = at + window - now
      reset = gap / 1000
      reset = reset - reset % 1
      if reset * 1000 < gap then
        reset = reset + 1
      end
    end
    local pxat = now / 1000
    pxat = pxat - pxat % 1
    pxat = (pxat * 1000 < now and pxat + 1 or pxat) + reset + FAST_SLACK
    if FAST_TEXT then
      pxat = fmt("%d", pxat)
    end
    if pos == 17 and len > 0 then
      -- Nothing left the window: the bytes before the newest entry stay as they are, so the
      -- write is in place, on both servers (one call more than a SET, but no new Lua string
      -- of the whole log to hash and to copy into the server: measured cheaper on Redis 7.0
      -- and on Valkey 9.1): the newest running count changes or an entry is appended, and
      -- the key's expiry moves. Only the first write may fail and leave the call to the
      -- general path (nothing written yet); the other is of the same key and kind, so it
      -- raises, as a module command failing half-way would.
      local written
      if newest == at then
        written = pcall_redis("SETRANGE", key, FAST_TEXT and fmt("%d", len - 3) or len - 3, spack("<I3", through))
      else
        written = pcall_redis("APPEND", key, spack(LG_ENTRY, at, through))
      end
      if type(written) == "table" then
        return nil -- an error reply (SETRANGE's and APPEND's own replies are numbers)
      end
      call("PEXPIREAT", key, pxat)
    else
      local value
      if newest == at then
        value = spack("<I5I8I3", LG_HEAD, window_ms, gone) .. sub(v, pos, len - 3) .. spack("<I3", through)
      elseif pos < len then
        value = spack("<I5I8I3", LG_HEAD, window_ms, gone) .. sub(v, pos, len) .. spack(LG_ENTRY, at, through)
      else
        value = spack("<I5I8I3I7I3", LG_HEAD, window_ms, gone, at, through)
      end
      if pcall_redis("SET", key, value, "PXAT", pxat).err then
        return nil
      end
    end
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 1, limit, left - cost, 0, reset
    return REPLY
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/calendar_quota.lua
  -- Calendar quota (core/src/quota.rs, core/src/calendar.rs): a fixed window whose windows
  -- are calendar periods at a fixed UTC offset; civil dates by Hinnant's algorithms.

  M.QU = { tag = "Q" }
  M.ALGO.Q = M.QU
  M.QU.PERIODS = { DAY = 1, WEEK = 2, MONTH = 3, YEAR = 4 }
  M.QU.PERIOD_ERROR = "ERR period must be DAY, WEEK, MONTH or YEAR"
  M.QU.TZ_ERROR = "tz must be an integer between -1439 and 1439"
  M.QU.DAY_MS = 86400000
  -- The options after the period, as `M.options` takes them.
  -- The options after the period (signed TZ, ANCHOR), for M.options and specs.
  M.QU.OPTIONS = {
    { token = "TZ", value = "minutes", parse = function(s) return M.QU.tz(s) end,
      missing = function() return M.QU.TZ_ERROR end },
    { token = "ANCHOR", value = "day", parse = function(s) return M.integer(s, { "anchor", 1, 31 }) end,
      missing = function() return M.range_text({ "anchor", 1, 31 }) end },
  }
  M.QU.options = M.QU.OPTIONS

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
    local limit = M.integer(args[i], M.KINDS.Q.params[1])
    local word = args[i + 1]
    local period = word and M.QU.PERIODS[word:upper()]
    if not period then
      M.fail(M.QU.PERIOD_ERROR)
    end
    return { limit = limit, period = period }
  end

  -- `given`: the options by token (TZ, ANCHOR), nil when none (a spec's were applied when
  -- it was parsed, and are kept).
  function M.QU.finish(p, given)
    local tz, anchor = given and given.TZ, given and given.ANCHOR
    if anchor and p.period ~= 3 and anchor ~= 1 then
      M.param_error({ "anchor (for a period other than MONTH)", 1, 1 })
    end
    p.tz = tz or p.tz or 0
    p.anchor = anchor or p.anchor or 1
    return p
  end

  -- As RL.QUOTA, `limit period` (TZ and ANCHOR are among the options, `finish` gets them); as
  -- a spec, the options follow in any order, each once (a repeat is left for the next spec).
  function M.QU.parse(args, i, spec)
    local p = M.QU.base(args, i)
    i = i + 2
    if not spec then
      return p, i
    end
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
    return M.QU.finish(p, given), i
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
    return M.compact("Q", { s.period_start, s.period_end - s.period_start, s.count })
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
    local d, count = M.window_count_check(p.limit, now, stop * 1000, n, cost)
    return d, count and { period_start = start, period_end = stop, count = count }
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

  -- RL.STATE's fields (core/src/quota.rs `view`).
  function M.QU.view(s, now)
    local now_ms = M.idiv(now, 1000)
    return {
      "period_start_ms", s.period_start,
      "period_end_ms", s.period_end,
      "count", now_ms < s.period_end and s.count or 0,
    }
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/concurrency.lua
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

  -- ------------------------------------------------------------------------------------------
  -- lua/src/commands.lua
  -- Commands: one per rate limiter (RL.<SPEC>), RL.ALL, RL.REFUND, RL.STATE, RL.RESET, and
  -- those the algorithms' sections add to M.COMMANDS (RL.THROTTLE, RL.CONCURRENCY).

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
  M.WAIT_LIMIT = M.EXACT - 2 * M.MAX_DURATION_MS
  function M.exact_wait(a, b, c, what)
    -- Most parameters: a x b is exact and its quotient far below the limit.
    local product = a * b
    if product <= M.EXACT and product / c < M.WAIT_LIMIT - 1 then
      return
    end
    if M.bnum(M.bdiv(M.bmul(a, b), c)) > M.WAIT_LIMIT then
      M.fail("ERR " .. what .. " is over 2^53 ms, beyond the exact range of the Lua twin: use the module for these parameters")
    end
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

  -- Spec words of RL.ALL and RL.REFUND, in any case.
  M.BY_SPEC = {}
  for _, tag in ipairs(M.LIMITERS) do
    M.BY_SPEC[M.KINDS[tag].spec] = tag
  end

  -- A spec of RL.ALL or RL.REFUND at args[i]: algorithm, params, next index; its errors
  -- prefixed as the module's SpecError.
  function M.parse_spec(args, i, prefix)
    local ok, a, p, nxt = pcall(function()
      local name = args[i]
      if name == nil then
        M.fail("missing, expected " .. M.ALGORITHMS .. " and its parameters")
      end
      local tag = M.BY_SPEC[name:upper()]
      if not tag then
        M.fail("unknown algorithm '" .. M.shown(name) .. "', expected " .. M.ALGORITHMS)
      end
      local algo = M.ALGO[tag]
      local params, after = algo.parse(args, i + 1, true)
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

  function M.finish(algo, p, option)
    if algo.finish then
      return algo.finish(p, option)
    end
    return p
  end

  -- RL.<SPEC> key params... [options]: one rate limiter.
  function M.run_single(name, tag, args)
    local algo = M.ALGO[tag]
    local kind = M.KINDS[tag]
    if #M.KEYS ~= 1 or #args < 1 + #kind.params then
      M.arity(name)
    end
    local p, i = algo.parse(args, 2, false)
    local cost, peek, upto, option, force = M.options(args, i, tag, kind.upto)
    p = M.finish(algo, p, option)
    local key = M.KEYS[1]
    local state = algo.read(key)
    local now = M.now_us()
    local d, new, granted
    if upto then
      d, new, granted = M.upto(algo, state, now, p, cost)
    elseif force then
      d, new = algo.force(state, now, p, cost)
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

  -- `COSTS n1 ... nk` right after RL.ALL's specs (as the module: src/commands/all.rs): each
  -- key's own cost, so that keys charged differently are still decided in one atomic call.
  -- Sets specs[i].cost; returns the index of the options after it.
  function M.parse_costs(args, at, specs)
    local word = args[at]
    if word == nil or word:upper() ~= "COSTS" then
      return at
    end
    local n = #specs
    if #args - at < n then
      M.fail("ERR COSTS needs one cost per key (" .. n .. ")")
    end
    for i = 1, n do
      specs[i].cost = M.integer(args[at + i], M.COST)
    end
    -- A cost's value is a number, never the word: any COST here is the option.
    for i = at + n + 1, #args do
      if args[i]:upper() == "COST" then
        M.fail("ERR COST and COSTS cannot be given together")
      end
    end
    return at + n + 1
  end

  function M.run_all(args)
    local n = #M.KEYS
    if n + #args < 3 then
      M.arity(args[1])
    end
    if n < 1 or n > M.MAX_ALL_KEYS then
      M.param_error({ "numkeys", 1, M.MAX_ALL_KEYS })
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
    at = M.parse_costs(args, at, specs)
    local cost, peek, _, _, force = M.options(args, at, nil, false)
    for i = 1, n do
      specs[i].p = M.finish(specs[i].algo, specs[i].p)
    end
    local states = {}
    for i = 1, n do
      states[i] = specs[i].algo.read(M.KEYS[i])
    end
    local now = M.now_us()
    local decisions, writes, denied = {}, {}, 0
    for i = 1, n do
      local decide = force and specs[i].algo.force or specs[i].algo.check
      decisions[i], writes[i] = decide(states[i], now, specs[i].p, specs[i].cost or cost)
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
    if rest == 0 then
      M.fail("ERR RL.REFUND needs COST n: the units to give back")
    elseif args[i]:upper() ~= "COST" then
      M.fail("ERR unknown option '" .. M.shown(args[i]) .. "', expected COST n")
    elseif rest == 1 then
      M.fail("ERR option COST needs a value: " .. M.range_text(M.COST))
    elseif rest > 2 then
      M.fail_repeated("COST")
    end
    local amount = M.integer(args[i + 1], M.COST)
    p = M.finish(algo, p)
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

  -- RL.STATE's and RL.RESET's one key and its first bytes (nil: missing).
  local function key_and_head(name, args)
    if #M.KEYS ~= 1 or #args ~= 1 then
      M.arity(name)
    end
    local key = M.KEYS[1]
    return key, M.get_prefix(key, 4)
  end

  -- RL.STATE key: the algorithm, the fields its view shows now, and the TTL (-1: none), as
  -- the module's map: a table under `map` is a map for a RESP3 caller and its pairs as a flat
  -- array for a RESP2 caller (the server converts; no `redis.setresp(3)` needed, which would
  -- turn the missing key's `false` into a RESP3 boolean). A Lua table keeps no order, so the
  -- pairs come in the server's table order, not the module's: read them by name. nil when the
  -- key is missing. Never writes.
  function M.run_state(name, args)
    local key, head = key_and_head(name, args)
    if not head then
      return false
    end
    local tag = M.tag_of(head)
    local algo = M.ALGO[tag]
    local s = algo.read(key)
    local pairs_of = { algorithm = M.KINDS[tag].name }
    local view = algo.view(s, M.now_us())
    for i = 1, #view, 2 do
      pairs_of[view[i]] = view[i + 1]
    end
    pairs_of.ttl_ms = call("PTTL", key)
    return { map = pairs_of }
  end

  -- RL.RESET key: deletes a limiter whatever its algorithm or state (even corrupt or of a
  -- newer format: the way out of a key the module cannot read); 0 when missing.
  function M.run_reset(name, args)
    local key, head = key_and_head(name, args)
    if not head then
      return 0
    end
    if #head < 5 or sub(head, 1, 3) ~= "\0RL" then
      M.not_ours()
    end
    call("DEL", key)
    return 1
  end


  for _, tag in ipairs(M.LIMITERS) do
    local command = "RL." .. M.KINDS[tag].spec
    M.COMMANDS[command] = M.COMMANDS[command] or function(name, args)
      return M.run_single(name, tag, args)
    end
  end
  M.COMMANDS["RL.ALL"] = function(_, args) return M.run_all(args) end
  M.COMMANDS["RL.REFUND"] = function(_, args) return M.run_refund(args) end
  M.COMMANDS["RL.STATE"] = M.run_state
  M.COMMANDS["RL.RESET"] = M.run_reset

  function M.main(args)
    local name = args[1]
    if name == nil then
      M.fail("ERR the Lua twin needs the command name after the keys (RL.TOKENBUCKET, RL.ALL, ...)")
    end
    local run = M.COMMANDS[name:upper()]
    if not run then
      M.fail("ERR unknown command '" .. M.shown(name) .. "' for the Lua twin")
    end
    return run(name, args)
  end

  -- ------------------------------------------------------------------------------------------
  -- lua/src/force.lua
  -- FORCE: take the cost whatever the limit says (core/src/*.rs `force`, RateLimiter::force in
  -- core/src/algorithm.rs). The decision is allowed; what went past the limit is a debt later
  -- calls wait for, kept as each algorithm keeps it. Each function returns the decision and
  -- the state to write, as `check` does; a cost that fits (or a cost of 0) is a plain check.

  -- An instant the twin can store (below 2^52 us), else its range error.
  local function storable(at)
    if M.bnum(at) > M.LATEST_US then
      M.fail("ERR a reply value is beyond the exact range of the Lua twin (2^53): use the module for this key")
    end
    return at
  end

  -- Until ms (rounded up) from `now` to the instant `at` (0 when past).
  local function since_now(at, now)
    return at > now and M.ceil_div(at - now, 1000) or 0
  end

  -- Token bucket: the bucket is emptied and refills from a later instant (when the deficit
  -- is paid back); the level then holds the fraction of a microsecond's refill left over.
  function M.TB.force(s, now, p, cost)
    local need = M.bmul(cost, p.unit)
    local level, as_of = M.tb_level_at(s, now, p)
    if M.bcmp(level, need) >= 0 then
      return M.TB.check(s, now, p, cost)
    end
    local deficit = M.bsub(need, level)
    local wait_us = M.bdivceil(deficit, p.rate)
    local paid_at = storable(M.badd(as_of, wait_us))
    local left = M.bmin(M.bsub(M.bmul(wait_us, p.rate), deficit), p.full)
    -- ceil(((paid_at - now) x rate + (full - left)) / (rate x 1000)) ms until full again.
    local until_full = M.ceil_millis(M.bdivceil(M.badd(M.bmul(paid_at - now, p.rate), M.bsub(p.full, left)), p.rate))
    return M.decision(true, p.capacity, 0, 0, until_full), { level = left, updated_at = paid_at, refill_ms = p.refill_ms }
  end

  -- GCRA: the theoretical arrival time moves on by the cost, at most MAX_COUNT intervals ahead.
  function M.GC.force(s, now, p, cost)
    local d, new = M.GC.check(s, now, p, cost)
    if d.allowed or cost == 0 then
      return d, new
    end
    local now_t = M.bmul(now, p.limit)
    local tat = M.bmax(s and M.gcra_tat_in(s, p.limit) or 0, now_t)
    local furthest = M.badd(now_t, M.bmul(M.MAX_COUNT, p.interval))
    local after = M.bmin(M.bsat(M.badd(tat, M.bmul(cost, p.interval))), furthest)
    local reset = M.ceil_millis(M.bdivceil(M.bsub(after, now_t), p.limit))
    return M.decision(true, p.burst, 0, 0, reset), { tat = after, limit = p.limit, period_ms = p.period_ms }
  end

  -- Sliding window: the units count in the current window (and weigh on the next).
  function M.SW.force(s, now, p, cost)
    local d, new = M.SW.check(s, now, p, cost)
    if d.allowed or cost == 0 then
      return d, new
    end
    local v = M.sw_view(s, now, p)
    local current = M.at_most(v.current + cost, M.MAX_COUNT)
    local reset = since_now(v.start + 2 * p.window, now)
    return M.decision(true, p.limit, 0, 0, reset),
      { window_ms = p.window_ms, window_start = M.ceil_div(v.start, 1000), previous = v.previous, current = current }
  end

  -- A window count (fixed window, calendar quota) over the limit until its window ends.
  local function forced_count(limit, now, end_us, n, cost)
    local after = n + cost
    if cost == 0 or after <= limit then
      return nil
    end
    return M.decision(true, limit, 0, 0, since_now(end_us, now)), M.at_most(after, M.MAX_COUNT)
  end

  function M.FW.force(s, now, p, cost)
    local start, n = M.fw_current(s, now, p.window_ms)
    local d, count = forced_count(p.limit, now, (start + p.window_ms) * 1000, n, cost)
    if not d then
      return M.FW.check(s, now, p, cost)
    end
    return d, { window_ms = p.window_ms, window_start = start, count = count }
  end

  function M.QU.force(s, now, p, cost)
    local start, stop, n = M.QU.current(s, now, p)
    local d, count = forced_count(p.limit, now, stop * 1000, n, cost)
    if not d then
      return M.QU.check(s, now, p, cost)
    end
    return d, { period_start = start, period_end = stop, count = count }
  end

  -- Sliding window log: the units logged at the latest instant (now, or the newest entry if
  -- later), the whole log at most MAX_LOG units and `limit` entries (the newest absorbs the rest).
  function M.LG.force(s, now, p, cost)
    local d, new = M.LG.check(s, now, p, cost)
    if d.allowed or cost == 0 then
      return d, new
    end
    local times = s and s.times or {}
    local counts = s and s.counts or {}
    local n, window = #times, p.window
    local at = (n > 0 and times[n] > now) and times[n] or now
    local new_times, new_counts, used = {}, {}, 0
    for i = 1, n do
      if times[i] + window > at then
        new_times[#new_times + 1] = times[i]
        new_counts[#new_counts + 1] = counts[i]
        used = used + counts[i]
      end
    end
    local m = #new_times
    cost = M.at_most(cost, M.MAX_LOG > used and M.MAX_LOG - used or 0)
    if cost > 0 then
      if m > 0 and (new_times[m] == at or m >= p.limit) then
        new_times[m] = at
        new_counts[m] = new_counts[m] + cost
      else
        new_times[m + 1] = at
        new_counts[m + 1] = cost
      end
    end
    return M.decision(true, p.limit, 0, 0, since_now(at + window, now)),
      { window_ms = p.window_ms, times = new_times, counts = new_counts }
  end

  return M
end

local M
-- M.FAST_DIRECT once built (empty before: the first call takes the general path, which
-- builds), so that the common call looks its fast code up in one step.
local DIRECT = {}

local function built()
  M = build()
  DIRECT = M.FAST_DIRECT
end

-- One call: `keys` and `args` as FCALL (or EVALSHA) passes them.
local function rl(keys, args)
  -- The common call on its fast code (lua/src/fast.lua), which raises no error: nil (another
  -- form of call, a refused server call) leaves it to the general path.
  if #keys == 1 then
    local direct = DIRECT[args[1]]
    if direct then
      local reply = direct(keys[1], args)
      if reply then
        return reply
      end
    end
  end
  if not M then
    built()
  end
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
  built()
  return rl(KEYS, ARGV)
end
