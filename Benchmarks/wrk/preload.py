"""Loads N records into Nimbus (private zone Bench, 200 per records/modify) and PocketBase
(200 per batch request), with the same names/ids the fetch scripts ask for."""
import json, sys, urllib.request

def post(url, body, headers={}):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)

def nimbus(url, container, environment, token, web, count):
    endpoint = f"{url}/database/1/{container}/{environment}/private/records/modify?ckAPIToken={token}&ckWebAuthToken={web}"
    for start in range(0, count, 200):
        operations = [{"operationType": "create", "record": {"recordType": "Item", "recordName": f"r{i}", "fields": {
            "title": {"value": f"item {i}"}, "category": {"value": f"c{i % 50}"}, "count": {"value": i}, "score": {"value": 0.5}}}}
            for i in range(start, min(start + 200, count))]
        answer = post(endpoint, {"zoneID": {"zoneName": "Bench"}, "operations": operations})
        failed = [r for r in answer["records"] if "serverErrorCode" in r]
        if failed: sys.exit(f"Nimbus preload failed: {failed[0]}")

def pocketbase(url, count):
    for start in range(0, count, 200):
        requests = [{"method": "POST", "url": "/api/collections/items/records", "body": {
            "id": f"r{i:014d}", "title": f"item {i}", "category": f"c{i % 50}", "count": i, "score": 0.5}}
            for i in range(start, min(start + 200, count))]
        post(f"{url}/api/batch", {"requests": requests})

if __name__ == "__main__":
    if sys.argv[1] == "nimbus":
        nimbus(*sys.argv[2:7], int(sys.argv[7]))
    else:
        pocketbase(sys.argv[2], int(sys.argv[3]))
