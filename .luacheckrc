-- luacheck (make lint) over lua/src: each file is a section of the one function `build()`
-- in lua/src/frame.lua, so the frame's locals and M are globals here.
std = "lua51"
max_line_length = 140
globals = { "M", "clock_s", "clock_us" }
read_globals = {
  "redis", "bit", "floor", "byte", "char", "fmt", "find", "sub", "call", "pcall_redis",
  "KEYS", "ARGV", "spack", "sunpack", "EMPTY",
}
-- The frame declares the locals the sections use.
files["lua/src/frame.lua"] = { globals = {}, read_globals = { "redis", "KEYS", "ARGV", "struct" }, ignore = { "211" } }
