"""Reads Prometheus' text format from standard input with Prometheus' own parser
(prometheus_client) and prints every sample as JSON: [{"name", "labels", "value"}].
A text the parser refuses exits non-zero with its reason."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        samples.append({"family": family.name, "type": family.type, "name": sample.name,
                        "labels": sample.labels, "value": sample.value})
print(json.dumps(samples))
