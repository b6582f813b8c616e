"""Adoption at scale against a running release icegate (auth off): a Hive-style dataset of
`--files` Parquet files (100 partitions) written by pyarrow is adopted in place; then a re-sync
with nothing new, and one after `--new` files appear. Prints each run's elapsed time (the run's
own measure, in its report), footers read per second, and the server's resident memory (VmRSS
now, VmHWM peak); beside it, PyIceberg's client-side `add_files` of the same files.

    scripts/bench-adoption.sh sqlite|postgres [--files 10000] [--new 100]  (starts the server)
"""
import argparse
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench_lifecycle import call, memory


def write(root, files, start=0):
    """`files` files of 100 rows, 4 columns, spread over 100 partitions (dt × region)."""
    for n in range(start, start + files):
        folder = root / f"dt=2026-11-{1 + n % 25:02d}" / f"region=r{n % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        ids = list(range(n * 100, n * 100 + 100))
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array([i * 0.5 for i in ids]),
                                 "name": pa.array([f"name-{i}" for i in ids]), "flag": pa.array([i % 2 == 0 for i in ids])}),
                       folder / f"part-{n:06d}.parquet")


def line(what, report, files, pid):
    elapsed = report["elapsed-ms"]
    rate = f", {files / (elapsed / 1000):,.0f} footers/s" if files else ""
    print(f"{what}: {report['files-added']} files added in {elapsed} ms{rate}; {memory(pid)}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--new", type=int, default=100)
    args = parser.parse_args()
    uri = args.uri
    with tempfile.TemporaryDirectory(prefix="icegate-adopt-") as tmp:
        lake = Path(tmp) / "lake" / "events"
        started = time.monotonic()
        write(lake, args.files)
        print(f"wrote {args.files} files in {time.monotonic() - started:.1f} s; {memory(args.pid)}", flush=True)
        call(uri, "POST", "/management/v1/warehouses/default/source-locations", {"location": f"file://{Path(tmp) / 'lake'}"})
        call(uri, "POST", "/v1/" + call(uri, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"] + "/namespaces",
             {"namespace": ["bench"]})
        report = call(uri, "POST", "/management/v1/warehouses/default/adoptions",
                      {"source": f"file://{lake}", "namespace": ["bench"], "name": "events", "partitioning": {"type": "hive"}})
        assert report["files-added"] == args.files and report["rows-added"] == args.files * 100, report
        line("adopt", report, args.files, args.pid)
        again = call(uri, "POST", f"/management/v1/warehouses/default/adoptions/{report['id']}/sync")
        assert again["files-added"] == 0, again
        line("re-sync, nothing new", again, 0, args.pid)
        # Beside it, the same files added client-side by PyIceberg's add_files (footers read by
        # pyarrow in the client, one commit; no Hive partitions: it takes them from footers only).
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog("bench", type="rest", uri=uri, warehouse="default")
        schema = pq.read_schema(next(lake.rglob("*.parquet")))
        table = catalog.create_table("bench.added", schema=schema)
        paths = sorted(f"file://{p}" for p in lake.rglob("*.parquet"))
        started = time.monotonic()
        table.add_files(paths, check_duplicate_files=True)
        elapsed = time.monotonic() - started
        print(f"PyIceberg add_files (client side): {len(paths)} files in {elapsed * 1000:.0f} ms, "
              f"{len(paths) / elapsed:,.0f} footers/s", flush=True)
        write(lake, args.new, start=args.files)
        more = call(uri, "POST", f"/management/v1/warehouses/default/adoptions/{report['id']}/sync")
        assert more["files-added"] == args.new, more
        line(f"re-sync, {args.new} new (of {args.files + args.new} listed)", more, 0, args.pid)


if __name__ == "__main__":
    main()
