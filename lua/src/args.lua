-- Errors and arguments, texts as the module's.

-- Errors travel as strings with a mark (Redis 7.0 turns an error object into its text), so
-- the entry point tells ours (and the server's) from a bug.
M.MARK = "\1rl\1"

function M.fail(text)
  error(M.MARK .. text, 0)
end

-- An option given twice (src/args.rs: RepeatedOption).
function M.fail_repeated(name)
  M.fail("ERR option " .. name .. " given more than once")
end

-- An argument as error texts show it: printable ASCII, other bytes as \xNN, at most 40.
function M.shown(s)
  local out = {}
  local n = #s > 40 and 40 or #s
  for i = 1, n do
    local b = byte(s, i)
    if b >= 32 and b <= 126 then
      out[#out + 1] = char(b)
    else
      out[#out + 1] = fmt("\\x%02x", b)
    end
  end
  if #s > 40 then
    out[#out + 1] = "..."
  end
  return table.concat(out)
end

function M.num(n)
  return fmt("%.0f", n)
end

function M.range_text(r)
  return r[1] .. " must be an integer between " .. M.num(r[2]) .. " and " .. M.num(r[3])
end

function M.param_error(r)
  M.fail("ERR " .. M.range_text(r))
end

-- A plain decimal integer in the range r = { name, min, max } (the module's `integer`):
-- digits only; any value over 2^53 is a double over every maximum, so the check is exact.
local function integer(s, r)
  if s == nil or s == "" or find(s, "%D") then
    M.param_error(r)
  end
  local n = tonumber(s)
  if n < r[2] or n > r[3] then
    M.param_error(r)
  end
  return n
end
M.integer = integer

-- The positional parameters of the algorithm with tag `tag` from args[i..]: a list of
-- numbers, and the next index.
function M.positional(tag, args, i)
  local ranges = M.KINDS[tag].params
  local values = {}
  for k = 1, #ranges do
    values[k] = integer(args[i + k - 1], ranges[k])
  end
  return values, i + #ranges
end

-- `[<option> v...] [COST n] [UPTO] [FORCE] [PEEK]` from args[i..] in any order, each at most
-- once: cost, peek, upto, the algorithm's own options by token (`BURST`: nil when none is
-- given) and force. Its own options are the section's `options` (with their own parse and
-- text) or the registry's (integers in a range). `with_upto` says whether UPTO is accepted.
function M.options(args, i, tag, with_upto)
  local n = #args
  if i > n then
    return 1, false, false, nil, false
  end
  local own = {}
  if tag then
    own = M.ALGO[tag].options or M.KINDS[tag].options
  end
  local cost, peek, upto, given, force
  while i <= n do
    local name = args[i]:upper()
    local o
    for k = 1, #own do
      if own[k].token == name then
        o = own[k]
      end
    end
    if o then
      given = given or {}
      if given[name] then
        M.fail_repeated(name)
      end
      if args[i + 1] == nil then
        M.fail("ERR option " .. name .. " needs a value: " .. (o.missing and o.missing() or M.range_text(o)))
      end
      given[name] = o.parse and o.parse(args[i + 1]) or integer(args[i + 1], o)
      i = i + 2
    elseif name == "COST" then
      if cost then
        M.fail_repeated("COST")
      end
      if args[i + 1] == nil then
        M.fail("ERR option COST needs a value: " .. M.range_text(M.COST))
      end
      cost = integer(args[i + 1], M.COST)
      i = i + 2
    elseif name == "PEEK" then
      if peek then
        M.fail_repeated("PEEK")
      end
      peek = true
      i = i + 1
    elseif with_upto and name == "UPTO" then
      if upto then
        M.fail_repeated("UPTO")
      end
      upto = true
      i = i + 1
    elseif name == "FORCE" then
      if force then
        M.fail_repeated("FORCE")
      end
      force = true
      i = i + 1
    else
      local expected = {}
      for k = 1, #own do
        expected[k] = own[k].token .. " " .. own[k].value .. ", "
      end
      M.fail("ERR unknown option '" .. M.shown(args[i]) .. "', expected " .. table.concat(expected)
        .. (with_upto and "COST n, UPTO, FORCE or PEEK" or "COST n, FORCE or PEEK"))
    end
  end
  if upto and force then
    -- A partial grant takes what fits; forcing takes everything: they contradict.
    M.fail("ERR options UPTO and FORCE cannot be combined")
  end
  return cost or 1, peek or false, upto or false, given, force or false
end

function M.arity(name)
  M.fail("ERR wrong number of arguments for '" .. name .. "' command")
end

-- The server's time in us (TIME); the fast code has the same lines.
function M.now_us()
  local t = call("TIME")
  if t[1] ~= clock_s then
    clock_s, clock_us = t[1], t[1] * 1000000
  end
  return clock_us + t[2]
end

-- The section of a window algorithm (RL.SLIDING, RL.FIXED, RL.LOG) with tag `tag`, its
-- parameters parsed: limit, window_ms, and the window in us.
function M.window_algorithm(tag)
  local algo = { tag = tag }
  function algo.parse(args, i)
    local v, nxt = M.positional(tag, args, i)
    return { limit = v[1], window_ms = v[2], window = v[2] * 1000 }, nxt
  end
  M.ALGO[tag] = algo
  return algo
end
