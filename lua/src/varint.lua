-- LEB128 varints (src/encoding: `Writer::varint`, `varint128`): the entries of a log, and
-- every field of the fixed-size states in format version 2.

-- A varint at `pos`: value, next position; nil when malformed or 2^53 or more.
local function read_varint(v, pos)
  local value, scale = 0, 1
  for k = 0, 7 do
    local b = byte(v, pos + k)
    if not b then
      return nil
    end
    if b < 128 then
      if b == 0 and k > 0 then
        return nil
      end
      value = value + b * scale
      if value > M.EXACT then
        return nil
      end
      return value, pos + k + 1
    end
    value = value + (b - 128) * scale
    scale = scale * 128
  end
  return nil
end
M.read_varint = read_varint

local function varint(out, v)
  -- `%` and an exact division instead of math.floor: no C call per byte.
  while v >= 128 do
    local r = v % 128
    out[#out + 1] = r + 128
    v = (v - r) / 128
  end
  out[#out + 1] = v
end
M.varint = varint

-- A varint of up to 128 bits (a bignum or a number), as the module writes a u128: a
-- bignum's 24-bit limbs are cut into 7-bit groups directly.
function M.bvarint(out, a)
  if type(a) == "number" then
    return varint(out, a)
  end
  local groups, acc, bits = {}, 0, 0
  for i = 1, #a do
    acc = acc + a[i] * 2 ^ bits
    bits = bits + 24
    while bits >= 7 do
      local q = floor(acc / 128)
      groups[#groups + 1] = acc - q * 128
      acc, bits = q, bits - 7
    end
  end
  while acc > 0 do
    local q = floor(acc / 128)
    groups[#groups + 1] = acc - q * 128
    acc = q
  end
  local n = #groups
  while n > 1 and groups[n] == 0 do
    n = n - 1
  end
  for i = 1, n - 1 do
    out[#out + 1] = groups[i] + 128
  end
  out[#out + 1] = groups[n]
end

-- A varint of up to 128 bits at `pos` (`bits`: 64 or 128): value (a bignum or a number),
-- next position; nil when malformed (truncated, not in its shortest form, over `bits`).
-- Below 2^53 it is read as a number (read_varint); above, its 7-bit groups are packed
-- into limbs.
local function read_bvarint(v, pos, bits)
  local value, nxt = read_varint(v, pos)
  if value then
    return value, nxt
  end
  local last = bits == 64 and 9 or 18
  local top = bits == 64 and 1 or 3
  local limbs, acc, have = {}, 0, 0
  for k = 0, last do
    local b = byte(v, pos + k)
    if not b then
      return nil
    end
    local final = b < 128
    if final and ((b == 0 and k > 0) or (k == last and b > top)) then
      return nil
    end
    acc = acc + (final and b or b - 128) * 2 ^ have
    have = have + 7
    if have >= 24 then
      local q = floor(acc / 16777216)
      limbs[#limbs + 1] = acc - q * 16777216
      acc, have = q, have - 24
    end
    if final then
      limbs[#limbs + 1] = acc
      return M.trim(limbs), pos + k + 1
    end
  end
  return nil
end

-- The fields of a version 2 value (varints after the header; `wide[i]` is 128 or 64 for
-- the fields that may exceed 2^53, their width): a list of values, or nil when malformed
-- or when bytes are left over.
function M.read_compact(v, wide)
  local out, pos = {}, 6
  for i = 1, #wide do
    local bits, value = wide[i]
    if bits then
      value, pos = read_bvarint(v, pos, bits)
    else
      value, pos = read_varint(v, pos)
    end
    if value == nil then
      return nil
    end
    out[i] = value
  end
  if pos ~= #v + 1 then
    return nil
  end
  return out
end

-- A version 2 value: the header, then `fields` as varints (numbers or bignums), built in
-- one reused table.
local scratch = {}
function M.compact(tag, fields)
  local n = 0
  for i = 1, #fields do
    local v = fields[i]
    if type(v) == "number" then
      while v >= 128 do
        local r = v % 128
        n = n + 1
        scratch[n] = r + 128
        v = (v - r) / 128
      end
      n = n + 1
      scratch[n] = v
    else
      local out = {}
      M.bvarint(out, v)
      for j = 1, #out do
        n = n + 1
        scratch[n] = out[j]
      end
    end
  end
  return "\0RL\2" .. tag .. char(unpack(scratch, 1, n))
end
