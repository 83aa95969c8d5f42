-- records/query: the 20 records of one random category (of the preload's 50), by count
-- descending, in the private zone "Bench" (the production schema makes category queryable and
-- count sortable). wrk.path carries the query string (API token and web auth token).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local body = '{"zoneID":{"zoneName":"Bench"},"resultsLimit":20,"query":{"recordType":"Item","filterBy":[{"comparator":"EQUALS",'
    .. '"fieldName":"category","fieldValue":{"value":"c' .. math.random(0, 49) .. '"}}],"sortBy":[{"fieldName":"count","ascending":false}]}}'
  return wrk.format(nil, nil, nil, body)
end
