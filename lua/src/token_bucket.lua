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
