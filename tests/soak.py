"""Soak: mixed load against one `icegate serve` for a while, watching its memory and open file
descriptors. An on-demand tool, not part of the test suite: `scripts/soak.sh [MINUTES]`.

Passes when no request failed, and RSS and open descriptors are flat over the second half of the
run (the first half is warm-up: caches and connection pools fill)."""

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from conftest import Server  # noqa: E402


def call(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def rss_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="icegate-soak-"))
    env = (
        {"ICEGATE__DATABASE__URL": args.database_url, "ICEGATE__CATALOG__CREATE_DEFAULT_WAREHOUSE": "true"}
        if args.database_url
        else {}
    )
    server = Server(workdir, [], env).start()
    base = server.uri
    with urllib.request.urlopen(f"{base}/v1/config") as r:
        prefix = json.load(r)["overrides"]["prefix"]
    call("POST", f"{base}/v1/{prefix}/namespaces", {"namespace": ["soak"]})
    schema = {"type": "struct", "fields": [{"id": 1, "name": "x", "required": False, "type": "long"}]}
    for w in range(args.workers):
        call("POST", f"{base}/v1/{prefix}/namespaces/soak/tables", {"name": f"t{w}", "schema": schema})

    counts = {"ok": 0, "errors": 0}
    lock = threading.Lock()
    deadline = time.monotonic() + args.minutes * 60

    def worker(w):
        n = 0
        while time.monotonic() < deadline:
            roll = random.random()
            table = f"{base}/v1/{prefix}/namespaces/soak/tables/t{w}"
            if roll < 0.7:
                status = call("GET", table)
            elif roll < 0.8:
                status = call("GET", f"{base}/v1/{prefix}/namespaces/soak/tables")
            else:
                # Each worker commits to its own table: no conflicts are expected.
                status = call("POST", table, {"requirements": [], "updates": [{"action": "set-properties", "updates": {"n": str(n)}}]})
                n += 1
            with lock:
                counts["ok" if status == 200 else "errors"] += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.workers)]
    for t in threads:
        t.start()
    samples = []
    while any(t.is_alive() for t in threads):
        pid = server.process.pid
        samples.append((time.monotonic(), rss_kb(pid), len(os.listdir(f"/proc/{pid}/fd"))))
        print(f"rss={samples[-1][1]} kB fds={samples[-1][2]} ok={counts['ok']} errors={counts['errors']}", flush=True)
        time.sleep(10 if args.minutes >= 2 else 2)
    for t in threads:
        t.join()
    server.stop()

    second_half = samples[len(samples) // 2 :]
    rss_growth = second_half[-1][1] - second_half[0][1]
    fd_growth = second_half[-1][2] - second_half[0][2]
    print(f"requests ok={counts['ok']} errors={counts['errors']}; second half: RSS {rss_growth:+} kB, fds {fd_growth:+}")
    failures = []
    if counts["errors"]:
        failures.append(f"{counts['errors']} requests failed")
    if rss_growth > max(0.1 * second_half[0][1], 8 * 1024):
        failures.append(f"RSS grew by {rss_growth} kB in the second half")
    if fd_growth > 8:
        failures.append(f"open descriptors grew by {fd_growth}")
    if failures:
        print("SOAK FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("soak passed")


if __name__ == "__main__":
    main()
