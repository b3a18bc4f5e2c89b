-- GCRA (core/src/gcra.rs): the arrival time in ticks of 1/limit us.

M.GC = { tag = "G" }
M.ALGO.G = M.GC

function M.gcra_params(limit, period_ms, burst)
  return { limit = limit, period_ms = period_ms, burst = burst or limit, interval = period_ms * 1000 }
end

-- As a spec of RL.ALL or RL.REFUND: `limit period_ms [BURST b]`; as RL.GCRA, BURST is one
-- of the options (`finish` gets it).
function M.GC.parse(args, i, spec)
  local v
  v, i = M.positional("G", args, i)
  local burst
  if spec and args[i] and args[i]:upper() == "BURST" then
    local r = M.KINDS.G.options[1]
    if args[i + 1] == nil then
      M.fail("ERR option BURST needs a value: " .. M.range_text(r))
    end
    burst = M.integer(args[i + 1], r)
    i = i + 2
  end
  return M.gcra_params(v[1], v[2], burst), i
end

function M.GC.finish(p, given)
  if given and given.BURST then
    p.burst = given.BURST
  end
  M.exact_wait(p.burst, p.period_ms, p.limit, "burst x period_ms / limit")
  return p
end

-- The latest TAT (in us) of a valid state: u64::MAX plus the longest burst.
M.GC.LATEST = M.badd(M.U64_MAX, M.bmul(M.MAX_COUNT, M.MAX_COUNT))

function M.GC.read(key)
  local v, f = M.read_fixed(key, "G", { 128, false, false })
  if not v then
    return nil
  end
  local s
  if f then
    s = { tat = f[1], limit = f[2], period_ms = f[3] }
  else
    s = { tat = M.read_u128(v, 6), limit = M.read_u64(v, 22), period_ms = M.read_u64(v, 30) }
  end
  if not M.valid_duration(s.period_ms) or not s.limit or s.limit < 1 or s.limit > M.MAX_COUNT then
    M.corrupt("G")
  end
  if type(s.tat) ~= "number" and M.bcmp(M.bdiv(s.tat, s.limit), M.GC.LATEST) > 0 then
    M.corrupt("G")
  end
  return s
end

function M.GC.encode(s)
  if type(s.tat) == "number" then
    return M.fixed_v1("G", s.tat, 0, s.limit, s.period_ms)
  end
  return M.compact("G", { s.tat, s.limit, s.period_ms })
end

function M.gcra_tat_in(s, limit)
  if s.limit == limit then
    return s.tat
  end
  local q, r = M.bdivmod(s.tat, s.limit)
  return M.bsat(M.badd(M.bsat(M.bmul(q, limit)), M.bdivceil(M.bmul(r, limit), s.limit)))
end

function M.GC.check(s, now, p, cost)
  local now_t = M.bmul(now, p.limit)
  local tat = M.bmax(s and M.gcra_tat_in(s, p.limit) or 0, now_t)
  local horizon = M.badd(now_t, M.bmul(p.burst, p.interval))
  local function to_millis(ticks)
    return M.ceil_millis(M.bdivceil(ticks, p.limit))
  end
  local function decide(allowed, retry, t)
    return M.decision(allowed, p.burst, M.bnum(M.bdiv(M.bsub(horizon, t), p.interval)), retry, to_millis(M.bsub(t, now_t)))
  end
  if cost > p.burst then
    return decide(false, -1, tat)
  end
  local after = M.bsat(M.badd(tat, M.bmul(cost, p.interval)))
  if M.bcmp(after, horizon) > 0 then
    return decide(false, to_millis(M.bsub(after, horizon)), tat)
  end
  local new
  if cost > 0 then
    new = { tat = after, limit = p.limit, period_ms = p.period_ms }
  end
  return decide(true, 0, after), new
end

function M.GC.refund(s, now, p, amount)
  local now_t = M.bmul(now, p.limit)
  local tat = s and M.gcra_tat_in(s, p.limit) or 0
  local refunded = M.bnum(M.bdivceil(M.bsub(tat, now_t), p.interval))
  if refunded > amount then
    refunded = amount
  end
  if refunded == 0 then
    return 0
  end
  local new_tat = M.bmax(M.bsub(tat, M.bmul(refunded, p.interval)), now_t)
  return refunded, { tat = new_tat, limit = p.limit, period_ms = p.period_ms }
end

-- RL.STATE's fields (core/src/gcra.rs `view`).
function M.GC.view(s, now)
  local ahead = M.bsub(s.tat, M.bmul(now, s.limit))
  return {
    "limit", s.limit,
    "period_ms", s.period_ms,
    "tat_ms", M.ceil_millis(M.bdivceil(s.tat, s.limit)),
    "used", M.bnum(M.bdivceil(ahead, s.period_ms * 1000)),
  }
end

-- RL.THROTTLE key max_burst count period_s [quantity] (core/src/throttle.rs): redis-cell's
-- CL.THROTTLE on the GCRA, on the same keys as RL.GCRA. Replies limited, max_burst + 1,
-- remaining, retry_after_s (-1 when allowed or never possible), reset_after_s; waits
-- rounded up to whole seconds.
function M.run_throttle(name, args)
  local n = #args
  if #M.KEYS ~= 1 or n < 4 or n > 5 then
    M.arity(name)
  end
  local T = M.THROTTLE
  local max_burst = M.integer(args[2], T[1])
  local count = M.integer(args[3], T[2])
  local period_s = M.integer(args[4], T[3])
  local cost = n == 5 and M.integer(args[5], T[4]) or 1
  local p = M.GC.finish(M.gcra_params(count, period_s * 1000, max_burst + 1))
  local key = M.KEYS[1]
  local state = M.GC.read(key)
  local now = M.now_us()
  local d, new = M.GC.check(state, now, p, cost)
  M.check_exact(d)
  if new then
    M.write(key, M.GC.encode(new), now, d.reset)
  end
  local retry = -1
  if not d.allowed and d.retry >= 0 then
    retry = M.ceil_div(d.retry, 1000)
  end
  return { d.allowed and 0 or 1, d.limit, d.remaining, retry, M.ceil_div(d.reset, 1000) }
end
M.COMMANDS["RL.THROTTLE"] = M.run_throttle
