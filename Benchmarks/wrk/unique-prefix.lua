-- A prefix for record names that no other wrk run repeats. wrk does not seed Lua's generator,
-- so math.random gave every run the same "unique" prefixes: from a run's second measurement on
-- against the same server, its creates named records that existed, and the server answered
-- each with a per-record error in a 200 (found 2026-12-02: create cells since then measured
-- mostly those refusals). Seeded once from the kernel.
local seeded = false
return function(letter)
  if not seeded then
    local source = io.open("/dev/urandom", "rb")
    local b = source:read(4)
    source:close()
    math.randomseed(((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) * 256 + b:byte(4))
    seeded = true
  end
  return letter .. tostring(math.random(1, 1e9))
end
