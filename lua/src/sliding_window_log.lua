-- Sliding window log (core/src/sliding_log.rs): varint-encoded entries, oldest first.

M.LG = M.window_algorithm("L")
M.MAX_LOG = M.KINDS.L.params[1][3]

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
  local parts = { "\0RL\1L" }
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
