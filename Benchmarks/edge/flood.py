"""A flood of maximal request bodies with nothing but an app's API token, and what it does to
the server: its peak resident memory and how long /health takes meanwhile (issue 42).

    python3 flood.py URL CONTAINER TOKEN PID BODY_BYTES CONCURRENCY SECONDS [ENDPOINT]

Each of CONCURRENCY clients, each from its own loopback address (127.0.0.2, 127.0.0.3, ...),
posts a BODY_BYTES JSON body to the public database's ENDPOINT (records/query: the largest body
an API token alone gets read; records/modify wants a user first) again and again: an array of
small numbers, the body that costs a JSON parser the most memory per byte. A probe, in a process of its
own (so the flooders' interpreter lock does not add to what it measures), asks /health every
20 ms on its own connection. Bounded: everything stops after SECONDS. Prints one
line of JSON: answers by status, /health latency percentiles, the server's peak RSS (VmHWM).
"""
import json
import multiprocessing
import socket
import sys
import threading
import time

url, container, token, pid, body_bytes, concurrency, seconds = sys.argv[1:8]
endpoint = sys.argv[8] if len(sys.argv) > 8 else "records/query"
host, port = url.removeprefix("http://").split(":")
port, pid, body_bytes, concurrency, seconds = int(port), int(pid), int(body_bytes), int(concurrency), float(seconds)

prefix, suffix = b'{"query":{"recordType":"Item"},"pad":[', b"1]}"
body = prefix + b"1," * ((body_bytes - len(prefix) - len(suffix)) // 2) + suffix
body += b" " * (body_bytes - len(body))
path = f"/database/1/{container}/development/public/{endpoint}?ckAPIToken={token}"
head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
deadline = time.monotonic() + seconds
statuses = {}
lock = threading.Lock()


def read_status(sock):
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1 ") else 0


def flooder(index):
    while time.monotonic() < deadline:
        status = -1
        try:
            sock = socket.socket()
            sock.bind((f"127.0.0.{2 + index}", 0))
            sock.settimeout(30)
            sock.connect((host, port))
            sock.sendall(head + body)
            status = read_status(sock)
        except OSError as error:
            status = type(error).__name__
        finally:
            sock.close()
        with lock:
            statuses[status] = statuses.get(status, 0) + 1


def rss_peak():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024


def probe(results):
    latencies = []
    sock = socket.create_connection((host, port))
    request = f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            sock.sendall(request)
            data = b""
            while b'"ok"' not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    raise OSError("closed")
                data += chunk
        except OSError:
            sock = socket.create_connection((host, port))
            continue
        latencies.append((time.monotonic() - started) * 1000)
        time.sleep(0.02)
    results.put(latencies)


results = multiprocessing.Queue()
prober = multiprocessing.Process(target=probe, args=(results,))
prober.start()
threads = [threading.Thread(target=flooder, args=(i,)) for i in range(concurrency)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
latencies = sorted(results.get())
prober.join()


def pct(p):
    return round(latencies[min(len(latencies) - 1, int(len(latencies) * p / 100))], 1)


print(json.dumps({
    "concurrency": concurrency, "bodyBytes": len(body), "answers": {str(k): v for k, v in sorted(statuses.items(), key=lambda item: str(item[0]))},
    "healthProbes": len(latencies), "healthP50ms": pct(50), "healthP99ms": pct(99), "healthMaxMs": round(latencies[-1], 1),
    "peakRSSMiB": rss_peak(),
}))
