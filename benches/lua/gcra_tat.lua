-- gcra_tat.lua: a GCRA limiter as a script, in the shape of go-redis/redis_rate's (written for
-- these benchmarks, not copied): the theoretical arrival time (TAT) as a number in a string
-- key, the time from the server (TIME), one GET and, when allowed, one SET with an expiry.
-- ARGV: burst, rate, period (seconds), cost. Returns {allowed, remaining}.
local key = KEYS[1]
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local interval = period / rate

-- Seconds since 2020 with microseconds: small enough that a double keeps the microseconds.
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1577836800) + tonumber(t[2]) / 1000000

local tat = tonumber(redis.call('GET', key)) or now
if tat < now then
  tat = now
end
local new_tat = tat + interval * cost
local allow_at = new_tat - interval * burst
if now < allow_at then
  return {0, 0}
end
redis.call('SET', key, string.format('%.6f', new_tat), 'EX', math.ceil(new_tat - now))
return {1, math.floor((now - allow_at) / interval)}
