#!/usr/bin/env python3
"""Renders the latest-figures tables of docs/performance.md from `agent-runner-bench --json`.

Each FILE holds one or more sittings' JSON (what `agent-runner-bench --case c1 --case c50
--json` prints, appended); every figure is the median over the sittings. The heading says
when and on what machine the figures were taken.

    python3 bench/performance.py --embedded sled.json --postgres pg.json
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess


def sittings(path):
    text, decoder, at, found = open(path).read(), json.JSONDecoder(), 0, []
    while at < len(text):
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            break
        rows, at = decoder.raw_decode(text, at)
        found.append(rows)
    return found


def median(rows, case, key):
    values = [r[key] for sitting in rows for r in sitting if r["case"] == case and key in r]
    return statistics.median(values) if values else None


def machine():
    model = "unknown CPU"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as info:
        kib = int(info.readline().split()[1])
    return f"{os.cpu_count()} cores of {model}, {kib / 1024 / 1024:.0f} GiB"


def build():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def fmt(value, digits=2):
    return "" if value is None else f"{value:.{digits}f}"


def written(m):
    """What a run wrote to disk: the embedded store's own writes, or PostgreSQL's WAL."""
    embedded, wal = m("written_per_run_kib"), m("wal_per_run_kib")
    if embedded is not None:
        return f"{embedded:.1f} KiB"
    return "" if wal is None else f"{wal:.1f} KiB of WAL"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--embedded", required=True, help="sittings on the embedded store")
    parser.add_argument("--postgres", help="sittings on PostgreSQL")
    parser.add_argument("--build", help="the commit measured (default: HEAD)")
    args = parser.parse_args()
    stores = [("embedded", sittings(args.embedded))]
    if args.postgres:
        stores.append(("PostgreSQL", sittings(args.postgres)))
    count = min(len(rows) for _, rows in stores)
    today = datetime.datetime.now(datetime.timezone.utc).date()
    print(f"Taken on {today} at {args.build or build()}, on {machine()}; the service, the scripted model,")
    print(f"the load and PostgreSQL share the machine. Medians of {count} sittings of")
    print("`agent-runner-bench --case c1 --case c50 --repeats 3 --json`, each sitting itself")
    print("the median of three repeats; times in ms.\n")
    print("| store | case | runs/s | latency p50 / p99 | first delta p50 / p99 | overhead per round p50 | over the floor p50 | peak RSS | CPU per run | PostgreSQL CPU per run | commits per run | written to disk per run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for store, rows in stores:
        for case in ("c1", "c50"):
            m = lambda key: median(rows, case, key)
            print(f"| {store} | {case} | {fmt(m('runs_per_sec'), 0)} | "
                  f"{fmt(m('latency_p50_ms'))} / {fmt(m('latency_p99_ms'))} | "
                  f"{fmt(m('ttft_p50_ms'))} / {fmt(m('ttft_p99_ms'))} | "
                  f"{fmt(m('overhead_per_round_p50_ms'))} | {fmt(m('over_floor_p50_ms'))} | "
                  f"{fmt(m('peak_rss_mib'), 0)} MiB | "
                  f"{fmt(m('cpu_per_run_ms'))} | {fmt(m('database_cpu_per_run_ms'))} | "
                  f"{fmt(m('database_commits_per_run'))} | {written(m)} |")


if __name__ == "__main__":
    main()
