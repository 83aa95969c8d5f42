#!/usr/bin/env python3
"""Sends one benchmark cell's requests one after another, the same ones every run.

    instructions-client.py URL-OF-RECORDS-ENDPOINTS AUTH-QUERY KIND COUNT RECORDS [SEED]

KIND is fetch, list, create or batch (the bodies Benchmarks/wrk's scripts send; a batch is 200
creates in one atomic request). Requests are drawn
from a generator seeded with SEED (a create's names too), so two builds asked the same count
answer the same requests: what Benchmarks/instructions.sh needs to compare the instructions they
execute. Exits non-zero if any answer is not 200.
"""
import http.client
import json
import random
import sys
import urllib.parse

base, auth, kind, count, records = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
seed = sys.argv[6] if len(sys.argv) > 6 else "count"
draw = random.Random(seed)
parts = urllib.parse.urlsplit(base)
connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
operation = {"fetch": "lookup", "list": "query", "create": "modify", "batch": "modify"}[kind]
path = f"{parts.path}/{operation}?{auth}"
headers = {"Content-Type": "application/json"}


def create(name, number):
    """One create operation, with the fields Benchmarks/wrk's create scripts send."""
    return {"operationType": "create", "record": {"recordType": "Item", "recordName": name, "fields": {
            "title": {"value": f"item {number}"}, "category": {"value": f"c{number % 50}"},
            "count": {"value": number}, "score": {"value": 0.5}}}}


for index in range(count):
    if kind == "fetch":
        body = {"zoneID": {"zoneName": "Bench"}, "records": [{"recordName": f"r{draw.randrange(records)}"}]}
    elif kind == "list":
        body = {"zoneID": {"zoneName": "Bench"}, "resultsLimit": 20, "query": {"recordType": "Item",
                "filterBy": [{"comparator": "EQUALS", "fieldName": "category", "fieldValue": {"value": f"c{draw.randrange(50)}"}}],
                "sortBy": [{"fieldName": "count", "ascending": False}]}}
    else:
        prefix = f"{seed}-{draw.randrange(10**9)}-{index}"
        if kind == "create":
            operations = [create(prefix, index)]
        else:
            operations = [create(f"{prefix}-{number}", number) for number in range(200)]
        body = {"zoneID": {"zoneName": "Bench"}, "operations": operations}
        if kind == "batch":
            body["atomic"] = True
    connection.request("POST", path, json.dumps(body), headers)
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200 or b"serverErrorCode" in answer:
        sys.exit(f"request {index}: {response.status} {answer[:300]!r}")
