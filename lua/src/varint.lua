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
  while v >= 128 do
    local q = floor(v / 128)
    out[#out + 1] = v - q * 128 + 128
    v = q
  end
  out[#out + 1] = v
end
M.varint = varint

-- A varint of up to 128 bits (a bignum or a number), as the module writes a u128.
function M.bvarint(out, a)
  while type(a) ~= "number" do
    local q, r = M.bdivmod(a, 128)
    out[#out + 1] = r + 128
    a = q
  end
  varint(out, a)
end

-- A varint of up to 128 bits at `pos` (`bits`: 64 or 128): value (a bignum or a number),
-- next position; nil when malformed (truncated, not in its shortest form, over `bits`).
-- Up to 7 bytes (below 2^49) it is summed as a number; longer ones as a bignum.
local function read_bvarint(v, pos, bits)
  local value, scale = 0, 1
  for k = 0, 6 do
    local b = byte(v, pos + k)
    if not b then
      return nil
    end
    if b < 128 then
      if b == 0 and k > 0 then
        return nil
      end
      return value + b * scale, pos + k + 1
    end
    value = value + (b - 128) * scale
    scale = scale * 128
  end
  local last = bits == 64 and 9 or 18
  local top = bits == 64 and 1 or 3
  local groups = {}
  for k = 0, last do
    local b = byte(v, pos + k)
    if not b then
      return nil
    end
    if b < 128 then
      if (b == 0 and k > 0) or (k == last and b > top) then
        return nil
      end
      groups[k + 1] = b
      local a = 0
      for g = #groups, 1, -1 do
        a = M.badd(M.bmul(a, 128), groups[g])
      end
      return a, pos + k + 1
    end
    groups[k + 1] = b - 128
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

-- A version 2 value: the header, then `fields` as varints (`wide` marks the wide ones).
function M.compact(tag, fields, wide)
  local out = {}
  for i = 1, #fields do
    if wide[i] then
      M.bvarint(out, fields[i])
    else
      varint(out, fields[i])
    end
  end
  return "\0RL\2" .. tag .. char(unpack(out))
end
