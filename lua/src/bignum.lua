-- Exact integer arithmetic on doubles.

-- Exact integer division of numbers below 2^53 (Lua's / rounds; this corrects it).
function M.idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- The smaller of two numbers (a refund gives back at most what was asked).
function M.at_most(a, b)
  return a < b and a or b
end

function M.imod(a, b)
  return a - M.idiv(a, b) * b
end

function M.ceil_div(a, b)
  local q = M.idiv(a, b)
  if q * b < a then
    return q + 1
  end
  return q
end

-- --------------------------------------------------------------------------------------
-- Integers of up to 128 bits and more: a Lua number while the value is below 2^53 (exact, and
-- fast), else an array of 24-bit limbs, least significant first, no trailing zero limbs
-- (limb products stay below 2^48, so every step is exact in doubles). Every operation takes
-- either form and returns a number whenever the result fits.
do
  local LIMB = 16777216 -- 2^24
  local EXACT = M.EXACT

  local function limbs(n)
    if type(n) == "table" then
      return n
    end
    local a = {}
    local i = 0
    while n > 0 do
      i = i + 1
      local q = floor(n / LIMB)
      a[i] = n - q * LIMB
      n = q
    end
    return a
  end

  -- Trims leading zero limbs; a number when below 2^53.
  local function norm(a)
    local n = #a
    while n > 0 and a[n] == 0 do
      a[n] = nil
      n = n - 1
    end
    if n <= 2 or (n == 3 and a[3] < 32) then
      return (a[1] or 0) + (a[2] or 0) * LIMB + (a[3] or 0) * LIMB * LIMB
    end
    return a
  end

  function M.bn(n) -- the identity: numbers and limb arrays mix freely
    return n
  end

  M.U64_MAX = { 16777215, 16777215, 65535 }
  M.U128_MAX = { 16777215, 16777215, 16777215, 16777215, 16777215, 255 }
  M.trim = norm

  local function cmp_limbs(a, b)
    if #a ~= #b then
      return #a < #b and -1 or 1
    end
    for i = #a, 1, -1 do
      if a[i] ~= b[i] then
        return a[i] < b[i] and -1 or 1
      end
    end
    return 0
  end

  function M.bcmp(a, b)
    local ta, tb = type(a) == "number", type(b) == "number"
    if ta and tb then
      return a < b and -1 or (a > b and 1 or 0)
    elseif ta then
      return -1 -- a number is below every (normalized) limb array
    elseif tb then
      return 1
    end
    return cmp_limbs(a, b)
  end

  function M.bmax(a, b)
    return M.bcmp(a, b) >= 0 and a or b
  end

  function M.bmin(a, b)
    return M.bcmp(a, b) <= 0 and a or b
  end

  function M.badd(a, b)
    if type(a) == "number" and type(b) == "number" then
      local sum = a + b
      if sum <= EXACT then
        return sum
      end
    end
    a, b = limbs(a), limbs(b)
    local r, carry = {}, 0
    local n = #a > #b and #a or #b
    for i = 1, n do
      local sum = (a[i] or 0) + (b[i] or 0) + carry
      if sum >= LIMB then
        r[i] = sum - LIMB
        carry = 1
      else
        r[i] = sum
        carry = 0
      end
    end
    if carry > 0 then
      r[n + 1] = carry
    end
    return norm(r)
  end

  -- a - b, or 0 when b > a.
  function M.bsub(a, b)
    if type(a) == "number" and type(b) == "number" then
      return a > b and a - b or 0
    end
    if M.bcmp(a, b) <= 0 then
      return 0
    end
    a, b = limbs(a), limbs(b)
    local r, borrow = {}, 0
    for i = 1, #a do
      local d = a[i] - (b[i] or 0) - borrow
      if d < 0 then
        r[i] = d + LIMB
        borrow = 1
      else
        r[i] = d
        borrow = 0
      end
    end
    return norm(r)
  end

  function M.bmul(a, b)
    if type(a) == "number" and type(b) == "number" then
      local product = a * b
      if product <= EXACT then
        return product
      end
    end
    a, b = limbs(a), limbs(b)
    if #a == 0 or #b == 0 then
      return 0
    end
    local r = {}
    for k = 1, #a + #b do
      r[k] = 0
    end
    for i = 1, #a do
      local ai, carry = a[i], 0
      for j = 1, #b do
        local k = i + j - 1
        local t = r[k] + ai * b[j] + carry
        carry = floor(t / LIMB)
        r[k] = t - carry * LIMB
      end
      local k = i + #b
      while carry > 0 do
        local t = r[k] + carry
        carry = floor(t / LIMB)
        r[k] = t - carry * LIMB
        k = k + 1
      end
    end
    return norm(r)
  end

  -- Saturating at u128::MAX, as the module's u128 arithmetic does.
  function M.bsat(a)
    return M.bmin(a, M.U128_MAX)
  end

  -- Pieces a limb is cut into for a divisor of a given size: remainder x piece < 2^53.
  local PIECE_BITS = { 24, 12, 8, 6, 4, 3 }

  -- Quotient and remainder (a number) of a / d for a number 1 <= d <= 2^50.
  function M.bdivmod(a, d)
    if type(a) == "number" then
      local q = M.idiv(a, d)
      return q, a - q * d
    end
    local s = 24
    for _, bits in ipairs(PIECE_BITS) do
      s = bits
      if d * 2 ^ bits <= 9007199254740992 then
        break
      end
    end
    local piece, per = 2 ^ s, 24 / s
    local q, r = {}, 0
    for i = #a, 1, -1 do
      local limb, ql = a[i], 0
      for k = per - 1, 0, -1 do
        local scale = piece ^ k
        local p = floor(limb / scale)
        limb = limb - p * scale
        local x = r * piece + p
        local qd = floor(x / d)
        local rest = x - qd * d
        if rest < 0 then
          qd = qd - 1
          rest = rest + d
        elseif rest >= d then
          qd = qd + 1
          rest = rest - d
        end
        r = rest
        ql = ql * piece + qd
      end
      q[i] = ql
    end
    return norm(q), r
  end

  function M.bdiv(a, d)
    local q = M.bdivmod(a, d)
    return q
  end

  function M.bdivceil(a, d)
    local q, r = M.bdivmod(a, d)
    if r > 0 then
      q = M.badd(q, 1)
    end
    return q
  end

  -- The value as a number; math.huge when it is not exact (2^53 or more).
  function M.bnum(a)
    if type(a) == "number" then
      return a
    end
    return math.huge
  end

  -- 16 little-endian bytes.
  function M.u128_bytes(a)
    if type(a) == "number" then
      return M.u64_bytes(a) .. "\0\0\0\0\0\0\0\0"
    end
    local b = {}
    for i = 1, 6 do
      local limb = a[i] or 0
      b[#b + 1] = limb % 256
      b[#b + 1] = floor(limb / 256) % 256
      b[#b + 1] = floor(limb / 65536)
    end
    return char(unpack(b, 1, 16))
  end

  function M.read_u128(str, at)
    local low = M.read_u64(str, at)
    if low and str:sub(at + 8, at + 15) == "\0\0\0\0\0\0\0\0" then
      return low
    end
    local a = {}
    for i = 0, 5 do
      local b1, b2, b3 = byte(str, at + 3 * i, at + 3 * i + 2)
      if i == 5 then
        b2, b3 = 0, 0
      end
      a[i + 1] = b1 + b2 * 256 + b3 * 65536
    end
    return norm(a)
  end

  -- u128 -> ceil(us / 1000) as a number (math.huge beyond 2^53: see `exact`).
  function M.ceil_millis(us)
    return M.bnum(M.bdivceil(us, 1000))
  end
end
