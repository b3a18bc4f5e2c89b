-- Stored bytes: magic "\0RL", version, tag, fields (src/encoding): version 1 has
-- little-endian fixed-width fields (a log: varints), version 2 the fields of a fixed-size
-- state as varints (the module writes it for T, S, F, G; the twin writes version 1), a
-- concurrency limiter's lease table, and a log of fixed-width entries (the twin's earlier
-- layout); version 3 a log of fixed-width entries with running counts (the twin writes it).

function M.corrupt(tag)
  M.fail("ERR key holds a corrupt redis-rl " .. M.KINDS[tag].name .. " limiter")
end

function M.not_ours()
  M.fail("ERR key holds a value that is not a redis-rl limiter")
end

-- The longest value a valid limiter of each kind has (src/encoding: `MAX_BODY_LEN`); a
-- longer one is corrupt and is never read whole.
M.MAX_LEN = {
  T = 5 + 39, S = 5 + 40, F = 5 + 30, G = 5 + 39, Q = 5 + 30,
  L = 5 + 6 + 12 * M.KINDS.L.params[1][3],
  C = 17 + 32768 * (14 + M.MAX_ID_LEN),
}
-- Tags with a version 2 (compact) form, and their version 1 length.
M.V1_LEN = { T = 37, S = 37, F = 29, G = 37, Q = 29 }

-- The tag of a value with our header, after the module's checks of version and kind.
function M.tag_of(v)
  if #v < 5 or sub(v, 1, 3) ~= "\0RL" then
    M.not_ours()
  end
  local version, stored = byte(v, 4), sub(v, 5, 5)
  if version ~= 1 and not (version == 2 and (stored == "C" or stored == "L" or M.V1_LEN[stored]))
    and not (version == 3 and stored == "L") then
    M.fail("ERR key holds a redis-rl limiter in format version " .. version .. ", this module reads version 1")
  end
  if not M.KINDS[stored] then
    M.fail("ERR key holds a redis-rl limiter of a kind this module does not know (tag " .. byte(v, 5) .. ")")
  end
  return stored
end

-- The key's first `len` bytes (nil when missing), or the server's error (WRONGTYPE).
function M.get_prefix(key, len)
  local v = pcall_redis("GETRANGE", key, 0, len)
  if type(v) == "table" and v.err then
    M.fail(v.err)
  end
  if v == "" then
    if call("EXISTS", key) == 0 then
      return nil
    end
    M.not_ours()
  end
  return v
end

-- The key's value if it holds a limiter of `tag` (nil when missing), else the module's error.
function M.read_value(key, tag)
  local v = M.get_prefix(key, M.MAX_LEN[tag])
  if not v then
    return nil
  end
  local stored = M.tag_of(v)
  if stored ~= tag then
    M.fail("ERR key holds a " .. M.KINDS[stored].name .. " limiter, not a " .. M.KINDS[tag].name .. " limiter")
  end
  if #v > M.MAX_LEN[tag] then
    M.corrupt(tag)
  end
  return v
end

function M.valid_duration(n)
  return n and n >= 1 and n <= M.MAX_DURATION_MS
end

-- A fixed-size state's value and, for version 2, its fields (varints; `wide` marks the
-- u128 ones, `u64` the ones that must fit 64 bits), or the module's "corrupt" error.
function M.read_fixed(key, tag, wide)
  local v = M.read_value(key, tag)
  if not v then
    return nil
  end
  if byte(v, 4) == 2 then
    return v, M.read_compact(v, wide) or M.corrupt(tag)
  end
  if #v ~= M.V1_LEN[tag] then
    M.corrupt(tag)
  end
  return v
end

-- A window's value and, for version 2, its fields with the window's index (field 2)
-- turned into the window's start (nil when the window is not valid).
function M.read_window(key, tag, wide)
  local v, f = M.read_fixed(key, tag, wide)
  if f then
    f[2] = M.valid_duration(f[1]) and f[2] * f[1] or nil
  end
  return v, f
end

-- Writes `value`, expiring `reset_after` ms after `now` (us) plus the TTL slack, as the
-- module does. A number argument reaches the server as its exact integer text.
function M.write(key, value, now, reset_after)
  local at = floor(now / 1000)
  if at * 1000 < now then
    at = at + 1
  end
  local r = pcall_redis("SET", key, value, "PXAT", at + reset_after + M.TTL_SLACK_MS)
  if type(r) == "table" and r.err then
    M.fail(r.err)
  end
end

-- A decision: allowed (true/false), limit, remaining, retry ("never" = -1), reset_after.
function M.decision(allowed, limit, remaining, retry, reset_after)
  return { allowed = allowed, limit = limit, remaining = remaining, retry = retry, reset = reset_after }
end

function M.u64_bytes(n)
  local b = {}
  for i = 1, 8 do
    local q = floor(n / 256)
    b[i] = n - q * 256
    n = q
  end
  return char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
end

-- A u64 field at offset `at` (1-based); nil when 2^53 or more (read as 48 + 16 bits, so
-- the double is never rounded).
function M.read_u64(s, at)
  local low, high = sunpack("<I6I2", s, at)
  if high >= 32 then
    return nil
  end
  return low + high * 281474976710656
end

-- Version 1 of a fixed-size state, which the twin writes (the module reads it, and writes
-- version 2 from then on): the header, then `fields` as 8-byte little-endian integers, all
-- numbers below 2^53, packed by the server's `struct` library in one call. Version 1 costs a
-- few bytes more per key than the module's varints, and saves the twin a loop per byte.
function M.fixed_v1(tag, a, b, c, d)
  if d then
    return "\0RL\1" .. tag .. spack("<I8I8I8I8", a, b, c, d)
  end
  return "\0RL\1" .. tag .. spack("<I8I8I8", a, b, c)
end
