-- GET one random preloaded record by ID (ids r00000000000000 …, 15 characters).
local records = tonumber(os.getenv("RECORDS") or "100000")
request = function()
  return wrk.format("GET", string.format("/api/collections/items/records/r%014d", math.random(0, records - 1)))
end
