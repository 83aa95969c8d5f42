-- records/lookup of one random preloaded record (r0 … r{N-1}) in the private zone "Bench".
-- wrk.path carries the query (API token and web auth token); RECORDS comes from the environment.
local records = tonumber(os.getenv("RECORDS") or "100000")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local body = '{"zoneID":{"zoneName":"Bench"},"records":[{"recordName":"r' .. math.random(0, records - 1) .. '"}]}'
  return wrk.format(nil, nil, nil, body)
end
