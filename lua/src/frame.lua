#!lua name=redisrl
-- redis-rl's Lua twin: the module's commands as one script, for servers that cannot load
-- modules (managed Redis and Valkey). Same replies, same error texts, same stored bytes as
-- the module, so a key written here is read and continued by the module and the other way
-- round. See docs/src/without-module.md.
--
-- Built by `make lua` from lua/src (this frame, one file per algorithm, the shared
-- sections) and tables generated from the core's registry: edit those, not lua/rl.lua.
--
-- A function library (Redis 7.0+, Valkey): load it once with `FUNCTION LOAD REPLACE`, then
-- call it as the command would be called, with the command name moved after the keys:
--
--   RL.TOKENBUCKET key 10 10 1000 COST 2   ->  FCALL rl 1 key RL.TOKENBUCKET 10 10 1000 COST 2
--   RL.ALL 2 k1 k2 SLIDING 10 1000 FIXED 5 1000  ->  FCALL rl 2 k1 k2 RL.ALL SLIDING 10 1000 FIXED 5 1000
--
-- Where FUNCTION is not allowed, the same file runs as a script: replace its first line with
-- `#!lua` and use `EVALSHA <sha> numkeys keys... RL.X args...` (slower: a script defines its
-- functions again on every call).
--
-- Commands: RL.TOKENBUCKET, RL.SLIDING, RL.FIXED, RL.GCRA, RL.LOG, RL.THROTTLE,
-- RL.CONCURRENCY, RL.ALL, RL.REFUND, RL.STATE, RL.RESET.
--
-- Time is the server's (TIME, in microseconds); writes replicate as their effects
-- (`SET key value PXAT ms`, the default from Redis 7.0); a denied call, a PEEK and a COST 0
-- write nothing.
--
-- Exactness: Lua numbers are doubles, exact for integers below 2^53. Every quantity that
-- can exceed that (a token bucket's level, a GCRA arrival time: up to 2^128) is a bignum
-- of 24-bit limbs, with exact integer division; below 2^53 the same operations run on
-- plain numbers. Every parameter range of the module is accepted. What the twin cannot
-- represent, it refuses instead of rounding:
-- * a reply field above 2^53 - 1 ms (a token bucket whose capacity x refill_ms /
--   refill_tokens, or a GCRA whose burst x period_ms / limit, is over 2^53 - 1 ms,
--   about 285,000 years): `ERR ... beyond the exact range of the Lua twin ...`, nothing
--   written;
-- * a stored instant after 2^52 us (year 2112) reads as a corrupt limiter.

local function build()
  -- Everything is built on the first call (FUNCTION LOAD runs the library without `math`
  -- or `string`) and kept: a library defines its functions once, a script on every call.
  local M = { ALGO = {}, COMMANDS = {} }
  M.TTL_SLACK_MS = 1000 -- the module's rl.ttl-slack-ms default
  M.MAX_ALL_KEYS = 16 -- rl.max-all-keys default
  M.EXACT = 9007199254740991 -- 2^53 - 1: the largest reply field the twin sends
  M.LATEST_US = 4503599627370496 -- 2^52: the latest stored instant the twin reads
  local floor = math.floor
  local byte, char, fmt, find, sub = string.byte, string.char, string.format, string.find, string.sub
  local call, pcall_redis = redis.call, redis.pcall
  local spack, sunpack = struct.pack, struct.unpack
  -- The last second TIME gave (its text) and it in us: converted once per second.
  local clock_s, clock_us
  -- Never written: `(t[a] or EMPTY)[b]` looks two levels down in one expression.
  local EMPTY = {}

  -- @SECTIONS@

  return M
end

local M
-- M.FAST_DIRECT once built (empty before: the first call takes the general path, which
-- builds), so that the common call looks its fast code up in one step.
local DIRECT = {}

local function built()
  M = build()
  DIRECT = M.FAST_DIRECT
end

-- One call: `keys` and `args` as FCALL (or EVALSHA) passes them.
local function rl(keys, args)
  -- The common call on its fast code (lua/src/fast.lua), which raises no error: nil (another
  -- form of call, a refused server call) leaves it to the general path.
  if #keys == 1 then
    local direct = DIRECT[args[1]]
    if direct then
      local reply = direct(keys[1], args)
      if reply then
        return reply
      end
    end
  end
  if not M then
    built()
  end
  M.KEYS = keys
  local ok, result = pcall(M.main, args)
  if ok then
    return result
  end
  local text = tostring(type(result) == "table" and result.err or result)
  if text:sub(1, #M.MARK) == M.MARK then
    return redis.error_reply(text:sub(#M.MARK + 1))
  end
  return redis.error_reply("ERR internal error in the redis-rl Lua twin (a bug: please report it): " .. text)
end

if redis.register_function then
  redis.register_function("rl", rl)
else
  built()
  return rl(KEYS, ARGV)
end
