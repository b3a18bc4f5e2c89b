-- Sliding window counter (core/src/sliding_window.rs).

M.SW = { tag = "S" }
M.ALGO.S = M.SW
function M.SW.parse(args, i)
  return M.window_params(args, i, "S")
end

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
  return M.fixed_v1("S", s.window_ms, s.window_start, s.previous, s.current)
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
    local estimate = M.bdivceil(M.badd(M.bmul(previous, old - elapsed), M.bmul(current, old)), old)
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
