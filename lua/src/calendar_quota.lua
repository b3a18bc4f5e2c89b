-- Calendar quota (core/src/quota.rs, core/src/calendar.rs): a fixed window whose windows
-- are calendar periods at a fixed UTC offset; civil dates by Hinnant's algorithms.

M.QU = { tag = "Q" }
M.ALGO.Q = M.QU
M.QU.PERIODS = { DAY = 1, WEEK = 2, MONTH = 3, YEAR = 4 }
M.QU.PERIOD_ERROR = "ERR period must be DAY, WEEK, MONTH or YEAR"
M.QU.TZ_ERROR = "tz must be an integer between -1439 and 1439"
M.QU.DAY_MS = 86400000
-- The options after the period, as `M.options` takes them.
-- The options after the period (signed TZ, ANCHOR), for M.options and specs.
M.QU.OPTIONS = {
  { token = "TZ", value = "minutes", parse = function(s) return M.QU.tz(s) end,
    missing = function() return M.QU.TZ_ERROR end },
  { token = "ANCHOR", value = "day", parse = function(s) return M.integer(s, { "anchor", 1, 31 }) end,
    missing = function() return M.range_text({ "anchor", 1, 31 }) end },
}
M.QU.options = M.QU.OPTIONS

-- A signed offset in minutes (the module's `Spelling::Offset`).
function M.QU.tz(s)
  if s == nil or not s:find("^%-?%d+$") or #s:gsub("^%-", "") > 19 then
    M.fail("ERR " .. M.QU.TZ_ERROR)
  end
  local n = tonumber(s)
  if not n or n < -1439 or n > 1439 then
    M.fail("ERR " .. M.QU.TZ_ERROR)
  end
  return n
end

-- limit and period at args[i], args[i + 1]; `finish` adds TZ and ANCHOR.
function M.QU.base(args, i)
  local limit = M.integer(args[i], M.KINDS.Q.params[1])
  local word = args[i + 1]
  local period = word and M.QU.PERIODS[word:upper()]
  if not period then
    M.fail(M.QU.PERIOD_ERROR)
  end
  return { limit = limit, period = period }
end

-- `given`: the options by token (TZ, ANCHOR), nil when none (a spec's were applied when
-- it was parsed, and are kept).
function M.QU.finish(p, given)
  local tz, anchor = given and given.TZ, given and given.ANCHOR
  if anchor and p.period ~= 3 and anchor ~= 1 then
    M.param_error({ "anchor (for a period other than MONTH)", 1, 1 })
  end
  p.tz = tz or p.tz or 0
  p.anchor = anchor or p.anchor or 1
  return p
end

-- As RL.QUOTA, `limit period` (TZ and ANCHOR are among the options, `finish` gets them); as
-- a spec, the options follow in any order, each once (a repeat is left for the next spec).
function M.QU.parse(args, i, spec)
  local p = M.QU.base(args, i)
  i = i + 2
  if not spec then
    return p, i
  end
  local given = {}
  local progress = true
  while progress and args[i] do
    progress = false
    for _, o in ipairs(M.QU.OPTIONS) do
      if not given[o.token] and args[i] and args[i]:upper() == o.token then
        if args[i + 1] == nil then
          M.fail("ERR option " .. o.token .. " needs a value: " .. o.missing())
        end
        given[o.token] = o.parse(args[i + 1])
        i = i + 2
        progress = true
      end
    end
  end
  return M.QU.finish(p, given), i
end

function M.QU.read(key)
  local v, f = M.read_fixed(key, "Q", { false, false, false })
  if not v then
    return nil
  end
  local start, length, count
  if f then
    start, length, count = f[1], f[2], f[3]
  else
    start = M.read_u64(v, 6)
    local stop = M.read_u64(v, 14)
    count = M.read_u64(v, 22)
    length = start and stop and stop - start
  end
  if not start or not length or length < 1 or length > 367 * M.QU.DAY_MS or not count
    or count > M.MAX_COUNT or (start + length) * 1000 > M.LATEST_US then
    M.corrupt("Q")
  end
  return { period_start = start, period_end = start + length, count = count }
end

function M.QU.encode(s)
  return M.compact("Q", { s.period_start, s.period_end - s.period_start, s.count })
end

function M.days_from_civil(y, m, d)
  if m <= 2 then
    y = y - 1
  end
  local era = M.idiv(y, 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = M.idiv(153 * mp + 2, 5) + d - 1
  local doe = yoe * 365 + M.idiv(yoe, 4) - M.idiv(yoe, 100) + doy
  return era * 146097 + doe - 719468
end

function M.civil_from_days(z)
  z = z + 719468
  local era = M.idiv(z, 146097)
  local doe = z - era * 146097
  local yoe = M.idiv(doe - M.idiv(doe, 1460) + M.idiv(doe, 36524) - M.idiv(doe, 146096), 365)
  local doy = doe - (365 * yoe + M.idiv(yoe, 4) - M.idiv(yoe, 100))
  local mp = M.idiv(5 * doy + 2, 153)
  local d = doy - M.idiv(153 * mp + 2, 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
end

function M.days_in_month(y, m)
  if m == 2 then
    local leap = M.imod(y, 4) == 0 and (M.imod(y, 100) ~= 0 or M.imod(y, 400) == 0)
    return leap and 29 or 28
  end
  return (m == 4 or m == 6 or m == 9 or m == 11) and 30 or 31
end

function M.QU.first_day(p, y, m)
  local last = M.days_in_month(y, m)
  return p.anchor < last and p.anchor or last
end

-- The number of the period containing `at_ms` (grows by one per period).
function M.QU.index(p, at_ms)
  local day = M.idiv(at_ms + p.tz * 60000, M.QU.DAY_MS)
  if p.period == 1 then
    return day
  elseif p.period == 2 then
    return M.idiv(day + 3, 7)
  elseif p.period == 3 then
    local y, m, d = M.civil_from_days(day)
    local month = y * 12 + m - 1
    return d < M.QU.first_day(p, y, m) and month - 1 or month
  end
  return (M.civil_from_days(day))
end

-- When period `index` starts, in ms since the epoch (0 for one that began before it).
function M.QU.start_of(p, index)
  local day
  if p.period == 1 then
    day = index
  elseif p.period == 2 then
    day = index * 7 - 3
  elseif p.period == 3 then
    local y = M.idiv(index, 12)
    local m = index - y * 12 + 1
    day = M.days_from_civil(y, m, M.QU.first_day(p, y, m))
  else
    day = M.days_from_civil(index, 1, 1)
  end
  local ms = day * M.QU.DAY_MS - p.tz * 60000
  return ms > 0 and ms or 0
end

function M.QU.current(s, now, p)
  local now_ms = M.idiv(now, 1000)
  local at = (s and s.period_start > now_ms) and s.period_start or now_ms
  local index = M.QU.index(p, at)
  local n = (s and at < s.period_end) and s.count or 0
  return M.QU.start_of(p, index), M.QU.start_of(p, index + 1), n
end

function M.QU.check(s, now, p, cost)
  local start, stop, n = M.QU.current(s, now, p)
  local d, count = M.window_count_check(p.limit, now, stop * 1000, n, cost)
  return d, count and { period_start = start, period_end = stop, count = count }
end

function M.QU.refund(s, now, p, amount)
  if not s then
    return 0
  end
  local start, stop, n = M.QU.current(s, now, p)
  local refunded = n < amount and n or amount
  if refunded == 0 or s.period_start ~= start or s.period_end ~= stop then
    return 0
  end
  return refunded, { period_start = start, period_end = stop, count = n - refunded }
end

-- RL.STATE's fields (core/src/quota.rs `view`).
function M.QU.view(s, now)
  local now_ms = M.idiv(now, 1000)
  return {
    "period_start_ms", s.period_start,
    "period_end_ms", s.period_end,
    "count", now_ms < s.period_end and s.count or 0,
  }
end
