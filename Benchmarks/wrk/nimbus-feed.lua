-- changes/zone: the private zone "Bench" paged through from no token, 200 records a page
-- (CloudKit's page size), each connection's next page asked with the token its last answer
-- gave and started over when an answer says no more is coming. Records per second are 200
-- times the requests per second (every page of the preload is full). The token and the flag are
-- found by text, not by parsing the page, so the load generator's cost stays that of a fetch.
-- wrk.path carries the query string (API token and web auth token).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local token = nil
request = function()
  local since = ""
  if token then since = ',"syncToken":"' .. token .. '"' end
  return wrk.format(nil, nil, nil, '{"zones":[{"zoneID":{"zoneName":"Bench"},"resultsLimit":200' .. since .. '}]}')
end
response = function(status, headers, body)
  if status ~= 200 or not string.find(body, '"moreComing":true', 1, true) then
    token = nil
  else
    token = string.match(body, '"syncToken":"([^"]+)"')
  end
end
