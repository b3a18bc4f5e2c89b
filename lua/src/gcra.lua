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
