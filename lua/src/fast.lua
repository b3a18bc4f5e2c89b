-- The fast path: the common call of a rate limiter (one key, its positional parameters, at
-- most the options its section takes, on a missing key or a version 1 value of the same
-- parameters whose numbers stay below 2^52) answered on plain numbers, with no intermediate
-- tables and the arguments parsed once per distinct text. Anything else (another option,
-- a bad argument, a value of version 2 or of other parameters, a number out of that range)
-- returns nil before any write, and the general path answers it: same replies, same bytes,
-- same expiries, the bignums and every error text there. The fast code calls the server with
-- redis.pcall and returns nil itself when a call fails (WRONGTYPE, NOPERM): before any write,
-- or at a write whose refusal leaves a value the general path continues to the same bytes;
-- so the entry point runs it without a pcall of its own (about 500 server instructions a
-- call). Each command's fast code is one function: it reads the key (GETRANGE from 0, and
-- EXISTS when that is empty), the server's clock (TIME) and its arguments (the caches below)
-- inline, and computes its waits and expiry inline, since a call from one Lua function to
-- another costs the server about as much as ten lines of arithmetic.

-- The command name as sent (exact case) -> function(key, args) -> reply, or nil.
M.FAST_DIRECT = {}

-- 2^52: every quantity of a fast call stays below it, so sums of two stay exact.
local FAST_MAX = 4503599627370496
M.FAST_MAX = FAST_MAX

-- Parsed arguments by their text, so a limiter's usual call converts no digits: positional
-- parameters in a tree per command (one level per parameter), option values by text.
-- Bounded: emptied when they hold too many.
local TREES, VALUES, cached = {}, {}, 0
local CACHE_MAX = 1024

local function forget_if_full()
  cached = cached + 1
  if cached > CACHE_MAX then
    for _, tree in ipairs(TREES) do
      for k in pairs(tree) do
        tree[k] = nil
      end
    end
    for k in pairs(VALUES) do
      VALUES[k] = nil
    end
    cached = 0
  end
end

-- A plain decimal integer of at most MAX_COUNT (digits only, as the module's `integer`),
-- or false.
local function plain(s)
  if s == "" or find(s, "%D") then
    return false
  end
  local n = tonumber(s)
  return n <= M.MAX_COUNT and n
end

-- An option's value (COST, BURST, a quantity) as `plain`, cached (the fast code looks it
-- up in M.FAST_VALUES first: `VALUES[s] or M.fast_value(s)`).
M.FAST_VALUES = VALUES
function M.fast_value(s)
  local n = VALUES[s]
  if n == nil then
    n = plain(s)
    VALUES[s] = n
    forget_if_full()
  end
  return n
end

-- The positional parameters args[2 .. count + 1] of a call, parsed (checked against
-- `ranges`, turned by `prepare(a, b, c)` into what the fast code needs, false when the
-- general path answers them) and kept in `tree`, one level per parameter, where the fast
-- code looks them up: tree[args[2]][args[3]]...
function M.fast_parse(tree, args, count, ranges, prepare)
  local node = tree
  for i = 2, count do
    local next_node = node[args[i]]
    if not next_node then
      next_node = {}
      node[args[i]] = next_node
    end
    node = next_node
  end
  local v, p = {}, true
  for i = 1, count do
    local n = plain(args[i + 1])
    if not n or n < ranges[i][2] or n > ranges[i][3] then
      p = false
    end
    v[i] = n
  end
  p = p and prepare(v[1], v[2], v[3]) or false
  node[args[count + 1]] = p
  forget_if_full()
  return p
end

-- A new tree of parameters, for a command's fast code, which looks a call's parameters up
-- as ((tree[args[2]] or EMPTY)[args[3]] or EMPTY)[args[4]].
function M.fast_tree()
  local tree = {}
  TREES[#TREES + 1] = tree
  return tree
end

-- The fast code's reply: one table, filled by every call (the server has read it before
-- the next call), so that no call leaves a table for the collector to free.
M.FAST_REPLY = {}

-- Redis before 7.2 formats a number given as a command argument with printf's %.17g
-- (costly); Valkey with a fast conversion of its own. `%d` text is cheaper than the first
-- and dearer than the second: the fast code sends text where this is true.
M.FAST_TEXT = (redis.REDIS_VERSION_NUM or 0) < 0x070200
-- Redis before 7.2 hashes every byte of each string its Lua makes (GETRANGE's reply, a
-- substring, a concatenation: about 7 server instructions a byte), so a change of a few
-- bytes costs it less as small writes in place (SETRANGE, APPEND, PEXPIREAT) than as a
-- whole new value built in Lua. On Valkey a call from Lua costs more (about 5,800
-- instructions, through the module API) and the hash less, and one SET measured cheaper
-- (scripts/twin_instructions.py).
M.IN_PLACE = M.FAST_TEXT
M.FAST_SLACK = M.TTL_SLACK_MS

-- The exact quotient of integers below 2^52, rounded up (a / b rounds; one step corrects it).
function M.cdiv(a, b)
  local q = floor(a / b)
  if q * b < a then
    return q + 1
  end
  return q
end
