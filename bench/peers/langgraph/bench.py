"""The agent-runner benchmark workload through LangGraph, for a side-by-side comparison.

A two-round ReAct agent (create_react_agent + ChatOpenAI, streaming) calls one
`current_time` tool and then streams its answer, against the scripted OpenAI-compatible
server. Reports runs/s, latency and time-to-first-token percentiles, and the peak RSS of
this process (agent and client together).
"""

import argparse
import asyncio
import json
import resource
import time
from datetime import datetime
from zoneinfo import ZoneInfo

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


@tool
def current_time(timezone: str = "UTC") -> str:
    """Get the current date and time in an IANA time zone."""
    return datetime.now(ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M:%S %Z")


async def one_run(agent):
    started = time.perf_counter()
    first = None
    ok = False
    async for chunk, _meta in agent.astream(
        {"messages": [("user", "What time is it?")]}, stream_mode="messages"
    ):
        if chunk.type == "AIMessageChunk" and chunk.content:
            if first is None:
                first = time.perf_counter() - started
            ok = True
    return time.perf_counter() - started, first, ok


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    model = ChatOpenAI(model="bench-model", base_url=args.base_url, api_key="unused",
                       streaming=True, stream_usage=True, max_retries=0)
    agent = create_react_agent(model, [current_time])
    for _ in range(3):
        await one_run(agent)

    remaining = args.runs
    results = []

    async def worker():
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            results.append(await one_run(agent))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    elapsed = time.perf_counter() - started
    ok = [r for r in results if r[2]]
    report = {
        "case": f"langgraph c{args.concurrency}",
        "concurrency": args.concurrency,
        "runs": len(results),
        "errors": len(results) - len(ok),
        "runs_per_sec": len(ok) / elapsed,
        "latency_p50_ms": percentile([r[0] * 1000 for r in ok], 50),
        "latency_p99_ms": percentile([r[0] * 1000 for r in ok], 99),
        "ttft_p50_ms": percentile([r[1] * 1000 for r in ok if r[1] is not None], 50),
        "ttft_p99_ms": percentile([r[1] * 1000 for r in ok if r[1] is not None], 99),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:>16}: {value:.2f}" if isinstance(value, float) else f"{key:>16}: {value}")


if __name__ == "__main__":
    asyncio.run(main())
