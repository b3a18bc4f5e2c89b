-- `make lint` runs luacheck on lua/: the Lua twin runs inside Redis and Valkey (Lua 5.1),
-- whose scripts and functions see these globals.
std = "lua51"
read_globals = { "redis", "KEYS", "ARGV", "cjson", "bit" }
max_line_length = 140
