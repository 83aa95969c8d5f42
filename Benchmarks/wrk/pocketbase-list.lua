-- The 20 items of one random category (of the preload's 50), by count descending, without the
-- total count (as Nimbus's query answers none); the collection has a (category, count) index.
request = function()
  return wrk.format("GET", "/api/collections/items/records?filter=%28category%3D%27c" .. math.random(0, 49)
    .. "%27%29&sort=-count&perPage=20&skipTotal=1")
end
