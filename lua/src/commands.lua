-- Commands: one per rate limiter (RL.<SPEC>), RL.ALL, RL.REFUND, RL.STATE, RL.RESET, and
-- those the algorithms' sections add to M.COMMANDS (RL.THROTTLE, RL.CONCURRENCY).

-- A partial grant (`UPTO`, core/src/algorithm.rs `upto`): min(cost, what a zero-cost check
-- leaves) units; nothing available is the denial of one unit, writing nothing; cost 0 is
-- the zero-cost check. Returns the decision, the new state (nil: write nothing), granted.
function M.upto(algo, s, now, p, cost)
  local probe = algo.check(s, now, p, 0)
  if cost == 0 then
    return probe, nil, 0
  end
  local granted = cost < probe.remaining and cost or probe.remaining
  local d, new = algo.check(s, now, p, granted > 0 and granted or 1)
  if d.allowed and granted > 0 then
    return d, new, granted
  end
  return d, nil, 0
end

-- Refuses parameters whose waits could exceed what a double holds exactly.
M.WAIT_LIMIT = M.EXACT - 2 * M.MAX_DURATION_MS
function M.exact_wait(a, b, c, what)
  -- Most parameters: a x b is exact and its quotient far below the limit.
  local product = a * b
  if product <= M.EXACT and product / c < M.WAIT_LIMIT - 1 then
    return
  end
  if M.bnum(M.bdiv(M.bmul(a, b), c)) > M.WAIT_LIMIT then
    M.fail("ERR " .. what .. " is over 2^53 ms, beyond the exact range of the Lua twin: use the module for these parameters")
  end
end

function M.check_exact(d)
  if d.remaining > M.EXACT or d.retry > M.EXACT or d.reset > M.EXACT then
    M.fail("ERR a reply value is beyond the exact range of the Lua twin (2^53): use the module for this key")
  end
  return d
end

function M.reply(d)
  return { d.allowed and 1 or 0, d.limit, d.remaining, d.retry, d.reset }
end

-- Spec words of RL.ALL and RL.REFUND, in any case.
M.BY_SPEC = {}
for _, tag in ipairs(M.LIMITERS) do
  M.BY_SPEC[M.KINDS[tag].spec] = tag
end

-- A spec of RL.ALL or RL.REFUND at args[i]: algorithm, params, next index; its errors
-- prefixed as the module's SpecError.
function M.parse_spec(args, i, prefix)
  local ok, a, p, nxt = pcall(function()
    local name = args[i]
    if name == nil then
      M.fail("missing, expected " .. M.ALGORITHMS .. " and its parameters")
    end
    local tag = M.BY_SPEC[name:upper()]
    if not tag then
      M.fail("unknown algorithm '" .. M.shown(name) .. "', expected " .. M.ALGORITHMS)
    end
    local algo = M.ALGO[tag]
    local params, after = algo.parse(args, i + 1, true)
    return algo, params, after
  end)
  if not ok then
    local text = tostring(a)
    if text:sub(1, #M.MARK) ~= M.MARK then
      error(a, 0)
    end
    text = text:sub(#M.MARK + 1):gsub("^ERR ", "")
    M.fail("ERR " .. prefix .. text)
  end
  return a, p, nxt
end

function M.finish(algo, p, option)
  if algo.finish then
    return algo.finish(p, option)
  end
  return p
end

-- RL.<SPEC> key params... [options]: one rate limiter.
function M.run_single(name, tag, args)
  local algo = M.ALGO[tag]
  local kind = M.KINDS[tag]
  if #M.KEYS ~= 1 or #args < 1 + #kind.params then
    M.arity(name)
  end
  local p, i = algo.parse(args, 2, false)
  local cost, peek, upto, option, force = M.options(args, i, tag, kind.upto)
  p = M.finish(algo, p, option)
  local key = M.KEYS[1]
  local state = algo.read(key)
  local now = M.now_us()
  local d, new, granted
  if upto then
    d, new, granted = M.upto(algo, state, now, p, cost)
  elseif force then
    d, new = algo.force(state, now, p, cost)
  else
    d, new = algo.check(state, now, p, cost)
  end
  M.check_exact(d)
  if new and not peek then
    M.write(key, algo.encode(new), now, d.reset)
  end
  local reply = M.reply(d)
  if upto then
    reply[6] = granted
  end
  return reply
end

-- `COSTS n1 ... nk` right after RL.ALL's specs (as the module: src/commands/all.rs): each
-- key's own cost, so that keys charged differently are still decided in one atomic call.
-- Sets specs[i].cost; returns the index of the options after it.
function M.parse_costs(args, at, specs)
  local word = args[at]
  if word == nil or word:upper() ~= "COSTS" then
    return at
  end
  local n = #specs
  if #args - at < n then
    M.fail("ERR COSTS needs one cost per key (" .. n .. ")")
  end
  for i = 1, n do
    specs[i].cost = M.integer(args[at + i], M.COST)
  end
  -- A cost's value is a number, never the word: any COST here is the option.
  for i = at + n + 1, #args do
    if args[i]:upper() == "COST" then
      M.fail("ERR COST and COSTS cannot be given together")
    end
  end
  return at + n + 1
end

function M.run_all(args)
  local n = #M.KEYS
  if n + #args < 3 then
    M.arity(args[1])
  end
  if n < 1 or n > M.MAX_ALL_KEYS then
    M.param_error({ "numkeys", 1, M.MAX_ALL_KEYS })
  end
  for i = 2, n do
    for j = 1, i - 1 do
      if M.KEYS[j] == M.KEYS[i] then
        M.fail("ERR key " .. i .. " repeats an earlier key: each key may appear once")
      end
    end
  end
  local specs, at = {}, 2
  for i = 1, n do
    local algo, p
    algo, p, at = M.parse_spec(args, at, "spec " .. i .. ": ")
    specs[i] = { algo = algo, p = p }
  end
  at = M.parse_costs(args, at, specs)
  local cost, peek, _, _, force = M.options(args, at, nil, false)
  for i = 1, n do
    specs[i].p = M.finish(specs[i].algo, specs[i].p)
  end
  local states = {}
  for i = 1, n do
    states[i] = specs[i].algo.read(M.KEYS[i])
  end
  local now = M.now_us()
  local decisions, writes, denied = {}, {}, 0
  for i = 1, n do
    local decide = force and specs[i].algo.force or specs[i].algo.check
    decisions[i], writes[i] = decide(states[i], now, specs[i].p, specs[i].cost or cost)
    M.check_exact(decisions[i])
    if denied == 0 and not decisions[i].allowed then
      denied = i
    end
  end
  if denied > 0 then
    for i = 1, n do
      if decisions[i].allowed then
        decisions[i] = M.check_exact(specs[i].algo.check(states[i], now, specs[i].p, 0))
      end
    end
  elseif not peek then
    for i = 1, n do
      if writes[i] then
        M.write(M.KEYS[i], specs[i].algo.encode(writes[i]), now, decisions[i].reset)
      end
    end
  end
  local per_key = {}
  for i = 1, n do
    local d = decisions[i]
    per_key[i] = { d.limit, d.remaining, d.retry, d.reset }
  end
  return { denied == 0 and 1 or 0, denied, per_key }
end

function M.run_refund(args)
  if #M.KEYS ~= 1 or #args < 4 then
    M.arity(args[1])
  end
  local algo, p, i = M.parse_spec(args, 2, "spec: ")
  local rest = #args - i + 1
  if rest == 0 then
    M.fail("ERR RL.REFUND needs COST n: the units to give back")
  elseif args[i]:upper() ~= "COST" then
    M.fail("ERR unknown option '" .. M.shown(args[i]) .. "', expected COST n")
  elseif rest == 1 then
    M.fail("ERR option COST needs a value: " .. M.range_text(M.COST))
  elseif rest > 2 then
    M.fail_repeated("COST")
  end
  local amount = M.integer(args[i + 1], M.COST)
  p = M.finish(algo, p)
  local key = M.KEYS[1]
  local state = algo.read(key)
  local now = M.now_us()
  local refunded, new = algo.refund(state, now, p, amount)
  local view = M.check_exact(algo.check(new or state, now, p, 0))
  if new then
    M.write(key, algo.encode(new), now, view.reset)
  end
  return { refunded, view.limit, view.remaining, 0, view.reset }
end

-- RL.STATE's and RL.RESET's one key and its first bytes (nil: missing).
local function key_and_head(name, args)
  if #M.KEYS ~= 1 or #args ~= 1 then
    M.arity(name)
  end
  local key = M.KEYS[1]
  return key, M.get_prefix(key, 4)
end

-- RL.STATE key: the algorithm, the fields its view shows now, and the TTL (-1: none), as
-- the module's map: a table under `map` is a map for a RESP3 caller and its pairs as a flat
-- array for a RESP2 caller (the server converts; no `redis.setresp(3)` needed, which would
-- turn the missing key's `false` into a RESP3 boolean). A Lua table keeps no order, so the
-- pairs come in the server's table order, not the module's: read them by name. nil when the
-- key is missing. Never writes.
function M.run_state(name, args)
  local key, head = key_and_head(name, args)
  if not head then
    return false
  end
  local tag = M.tag_of(head)
  local algo = M.ALGO[tag]
  local s = algo.read(key)
  local pairs_of = { algorithm = M.KINDS[tag].name }
  local view = algo.view(s, M.now_us())
  for i = 1, #view, 2 do
    pairs_of[view[i]] = view[i + 1]
  end
  pairs_of.ttl_ms = call("PTTL", key)
  return { map = pairs_of }
end

-- RL.RESET key: deletes a limiter whatever its algorithm or state (even corrupt or of a
-- newer format: the way out of a key the module cannot read); 0 when missing.
function M.run_reset(name, args)
  local key, head = key_and_head(name, args)
  if not head then
    return 0
  end
  if #head < 5 or sub(head, 1, 3) ~= "\0RL" then
    M.not_ours()
  end
  call("DEL", key)
  return 1
end


for _, tag in ipairs(M.LIMITERS) do
  local command = "RL." .. M.KINDS[tag].spec
  M.COMMANDS[command] = M.COMMANDS[command] or function(name, args)
    return M.run_single(name, tag, args)
  end
end
M.COMMANDS["RL.ALL"] = function(_, args) return M.run_all(args) end
M.COMMANDS["RL.REFUND"] = function(_, args) return M.run_refund(args) end
M.COMMANDS["RL.STATE"] = M.run_state
M.COMMANDS["RL.RESET"] = M.run_reset

function M.main(args)
  local name = args[1]
  if name == nil then
    M.fail("ERR the Lua twin needs the command name after the keys (RL.TOKENBUCKET, RL.ALL, ...)")
  end
  local run = M.COMMANDS[name:upper()]
  if not run then
    M.fail("ERR unknown command '" .. M.shown(name) .. "' for the Lua twin")
  end
  return run(name, args)
end
