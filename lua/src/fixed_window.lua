-- Fixed window counter (core/src/fixed_window.rs).

M.FW = { tag = "F" }
M.ALGO.F = M.FW
function M.FW.parse(args, i)
  return M.window_params(args, i, "F")
end

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

-- RL.STATE's fields (core/src/fixed_window.rs `view`).
function M.FW.view(s, now)
  local _, n = M.fw_current(s, now, s.window_ms)
  return { "window_ms", s.window_ms, "window_start_ms", s.window_start, "count", n }
end
