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
