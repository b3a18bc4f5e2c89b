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
