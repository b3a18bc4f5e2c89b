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
