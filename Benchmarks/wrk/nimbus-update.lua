-- records/modify saving over one random preloaded record (r0 … r{N-1}) in the private zone
-- "Bench" with forceUpdate: each save replaces a row, which is what keeping versions costs
-- (docs/operations.md, "Time travel"; creates replace nothing).
local records = tonumber(os.getenv("RECORDS") or "100000")
local counter = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local body = '{"zoneID":{"zoneName":"Bench"},"operations":[{"operationType":"forceUpdate","record":{"recordType":"Item","recordName":"r'
    .. math.random(0, records - 1) .. '","fields":{"title":{"value":"edit ' .. counter .. '"},"count":{"value":' .. counter .. '}}}}]}'
  return wrk.format(nil, nil, nil, body)
end
