-- POST one record to the items collection.
local counter = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local body = '{"title":"item ' .. counter .. '","category":"c' .. (counter % 50) .. '","count":' .. counter .. ',"score":0.5}'
  return wrk.format(nil, "/api/collections/items/records", nil, body)
end
