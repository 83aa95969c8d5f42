-- records/modify creating 200 records in one atomic batch (names unique to this thread and
-- request), as NimbusBench's batch scenario: the request counts once, the records 200 times.
local counter = 0
local prefix
local unique = dofile("Benchmarks/wrk/unique-prefix.lua")
setup = function(thread) thread:set("id", unique("b")) end
init = function() prefix = id .. "-" end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local operations = {}
  for i = 1, 200 do
    counter = counter + 1
    operations[i] = '{"operationType":"create","record":{"recordType":"Item","recordName":"' .. prefix .. counter
      .. '","fields":{"title":{"value":"item ' .. counter .. '"},"category":{"value":"c' .. (counter % 50)
      .. '"},"count":{"value":' .. counter .. '},"score":{"value":0.5}}}}'
  end
  local body = '{"zoneID":{"zoneName":"Bench"},"atomic":true,"operations":[' .. table.concat(operations, ",") .. ']}'
  return wrk.format(nil, nil, nil, body)
end
