-- Sliding window log (core/src/sliding_log.rs): entries oldest first. The module writes
-- version 1 (varints: small); the twin writes version 2 (src/encoding/sliding_log.rs):
-- `window_ms` (8 bytes), the total count (2), then per entry its instant (8) and count (2),
-- little-endian, which its fast code reads and drops at computed offsets, a constant
-- number of Lua operations per call. Each side reads both.

M.LG = M.window_algorithm("L")
M.MAX_LOG = M.KINDS.L.params[1][3]
local LG_HEAD = sunpack("<I5", "\0RL\2L")

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

function M.LG.read(key)
  local v = M.read_value(key, "L")
  if not v then
    return nil
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
  local parts, total = {}, 0
  for i = 1, #s.times do
    parts[i + 1] = spack("<I8I2", s.times[i], s.counts[i])
    total = total + s.counts[i]
  end
  parts[1] = spack("<I5I8I2", LG_HEAD, s.window_ms, total)
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
-- missing key or a version 2 log of the same window, in one function. The entries that
-- left the window are read from the front and dropped with a substring; the units still
-- in it are the stored total less theirs; a denial reads entries from the front until
-- enough units would leave; a write appends one entry (or adds to the newest at the same
-- instant). The fast code checks the header, the length and the entries it reads (the
-- general path checks every entry).
local function lg_prepare(limit, window_ms)
  return window_ms * 1000 < M.FAST_MAX and { limit, window_ms, window_ms * 1000 }
end
local LG_TREE, LG_RANGES = M.fast_tree(), M.KINDS.L.params
-- The longest valid version 2 log, and GETRANGE's last offset: one byte more, so a
-- longer value is seen as such.
local LG_LONGEST = 15 + 10 * M.MAX_LOG
local LG_LAST = fmt("%d", LG_LONGEST)
local FAST_MAX, MAX_LOG = M.FAST_MAX, M.MAX_LOG
local IN_PLACE = M.IN_PLACE

M.FAST["RL.LOG"] = function(key, args)
  local p, cost = M.fast_pair_args(LG_TREE, LG_RANGES, lg_prepare, args)
  if not p then
    return nil
  end
  local limit, window_ms, window = p[1], p[2], p[3]
  local v, now = M.fast_read(key, LG_LAST)
  if not v then
    return nil
  end
  local len, pos, used, newest = #v, 16, 0, nil
  local at = now
  if len > 15 then
    if len > LG_LONGEST or (len - 15) % 10 ~= 0 then
      return nil
    end
    -- The header and the oldest entry in one unpack; the newest from the end.
    local head, stored_ms, total, t, c = sunpack("<I5I8I2I8I2", v)
    if head ~= LG_HEAD or stored_ms ~= window_ms or total > MAX_LOG then
      return nil
    end
    local last, n = t, c
    if len > 25 then
      last, n = sunpack("<I8I2", v, len - 9)
    end
    if last >= FAST_MAX or n == 0 then
      return nil
    end
    if last > now then
      at = last
    end
    -- The entries that left the window: their units are no longer used.
    local previous = 0
    used = total
    while t + window <= at do
      if t < previous or c == 0 or c > used then
        return nil
      end
      previous, used, pos = t, used - c, pos + 10
      if pos > len then
        break
      end
      t, c = sunpack("<I8I2", v, pos)
    end
    if pos < len then
      newest = last
    elseif used ~= 0 then
      return nil
    end
  elseif len > 0 then
    if len ~= 15 then
      return nil
    end
    local head, stored_ms, total = sunpack("<I5I8I2", v)
    if head ~= LG_HEAD or stored_ms ~= window_ms or total ~= 0 then
      return nil
    end
  end
  local reset = 0
  if newest then
    reset = M.cdiv(newest + window - now, 1000)
  end
  local left = limit - used
  if cost > limit then
    return { 0, limit, left > 0 and left or 0, -1, reset }
  end
  local excess = used + cost - limit
  if excess > 0 then
    -- The oldest entries whose units, once out of the window, let the call in.
    local i, freed, t, c = pos, 0, 0, 0
    while freed < excess and i < len do
      t, c = sunpack("<I8I2", v, i)
      freed, i = freed + c, i + 10
    end
    if freed < excess or c == 0 then
      return nil
    end
    local retry = t + window > now and M.cdiv(t + window - now, 1000) or 0
    return { 0, limit, left > 0 and left or 0, retry, reset }
  end
  if cost == 0 then
    return { 1, limit, left, 0, reset }
  end
  -- Usually written at `now` (the clock did not go back): the whole window, in ms.
  reset = at == now and window_ms or M.cdiv(at + window - now, 1000)
  if pos == 16 and len > 0 and IN_PLACE then
    -- Nothing left the window: the stored total and the newest entry change (or one is
    -- appended) in place, and the key's expiry moves.
    local pxat = M.fast_expiry(now, reset)
    call("SETRANGE", key, "13", spack("<I2", used + cost))
    if newest == at then
      call("SETRANGE", key, M.FAST_TEXT and fmt("%d", len - 2) or len - 2, spack("<I2", sunpack("<I2", v, len - 1) + cost))
    else
      call("APPEND", key, spack("<I8I2", at, cost))
    end
    call("PEXPIREAT", key, pxat)
    return { 1, limit, left - cost, 0, reset }
  end
  local value
  if newest == at then
    value = spack("<I5I8I2", LG_HEAD, window_ms, used + cost) .. sub(v, pos, len - 2)
      .. spack("<I2", sunpack("<I2", v, len - 1) + cost)
  else
    value = spack("<I5I8I2", LG_HEAD, window_ms, used + cost) .. sub(v, pos, len) .. spack("<I8I2", at, cost)
  end
  call("SET", key, value, "PXAT", M.fast_expiry(now, reset))
  return { 1, limit, left - cost, 0, reset }
end
