# Shared by the benchmark scripts: build release binaries and start a server on a fresh
# data directory. After `start_server MODE`: URL, C (container), TOKEN, WEB (web auth token),
# PID and DATA are set, and the private zone "Bench" exists. `stop_server` ends it.

build_release() {
  swift build -c release --product nimbus
  swift build -c release --product NimbusBench
  BIN=$(swift build -c release --show-bin-path)
}

start_server() {
  local mode=$1
  DATA=$(mktemp -d /tmp/nimbus-bench.XXXXXX)
  C=iCloud.bench.nimbus
  "$BIN/nimbus" containers create "$C" --data-dir "$DATA" >/dev/null
  TOKEN=$("$BIN/nimbus" tokens create --container "$C" --data-dir "$DATA")
  NIMBUS_PASSWORD_ROUNDS=1000 "$BIN/nimbus" users create bench --password bench-password --data-dir "$DATA" >/dev/null
  "$BIN/nimbus" serve --data-dir "$DATA" --port 0 --sync "$mode" --log-level error > "$DATA/serve.log" 2>&1 &
  PID=$!
  trap 'kill $PID 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do grep -q "listening on" "$DATA/serve.log" && break; sleep 0.1; done
  URL=$(grep -o 'http://[0-9.:]*' "$DATA/serve.log" | head -1)
  local auth
  auth=$(curl -s -X POST "$URL/auth/1/$C/development/signin?ckAPIToken=$TOKEN" -d '{"username":"bench","password":"bench-password"}')
  WEB=$(echo "$auth" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ckWebAuthToken"])')
  curl -s -X POST "$URL/database/1/$C/development/private/zones/modify?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB" \
    -d '{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Bench"}}}]}' >/dev/null
}

stop_server() {
  kill "$PID"; wait "$PID" 2>/dev/null || true
  trap - EXIT
  rm -rf "$DATA"
}
