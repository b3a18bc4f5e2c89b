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
