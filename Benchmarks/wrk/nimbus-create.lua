-- records/modify creating one record with a name unique to this thread and request.
local counter = 0
local prefix
local unique = dofile("Benchmarks/wrk/unique-prefix.lua")
setup = function(thread) thread:set("id", unique("w")) end
init = function() prefix = id .. "-" end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local body = '{"zoneID":{"zoneName":"Bench"},"operations":[{"operationType":"create","record":{"recordType":"Item","recordName":"'
    .. prefix .. counter .. '","fields":{"title":{"value":"item ' .. counter .. '"},"category":{"value":"c' .. (counter % 50)
    .. '"},"count":{"value":' .. counter .. '},"score":{"value":0.5}}}}]}'
  return wrk.format(nil, nil, nil, body)
end
