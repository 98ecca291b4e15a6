"""A Python client of agent-runner, using stubs generated from the service's protos.

Shows: metadata (tenant or API key), a run whose events print as they stream, a tool preset
passed as a google.protobuf.Struct, reading the message and its thoughts back, a deadline
that cancels the run on the server, Attach to read a run's events again, Cancel, and
listing the tenant's runs.

    pip install -r requirements.txt && ./generate.sh
    AGENT_RUNNER_ADDR=127.0.0.1:50051 AGENT_RUNNER_MODEL=openai/gpt-4o-mini python run_agent.py

Exits non-zero when the service does not behave as shown.
"""

import os
import sys

import grpc
from google.protobuf import struct_pb2

from agentrunner.v1 import agent_pb2, agent_pb2_grpc

ADDR = os.environ.get("AGENT_RUNNER_ADDR", "127.0.0.1:50051")
MODEL = os.environ.get("AGENT_RUNNER_MODEL", "openai/gpt-4o-mini")


def metadata():
    """An API key names its tenant; a server without keys takes the tenant from x-tenant-id."""
    key = os.environ.get("AGENT_RUNNER_API_KEY")
    if key:
        return [("authorization", f"Bearer {key}")]
    return [("x-tenant-id", os.environ.get("AGENT_RUNNER_TENANT", "examples"))]


def struct(values):
    """A Struct field takes a Struct message; update() converts a dict into one."""
    message = struct_pb2.Struct()
    message.update(values)
    return message


def run_request(query):
    provider, name = MODEL.split("/", 1)
    return agent_pb2.RunRequest(
        query=query,
        agent=agent_pb2.AgentConfig(
            model=agent_pb2.ModelConfig(
                provider=provider, name=name, parameters=struct({"temperature": 0})
            ),
            instruction="You are a precise assistant. Use tools for the time.",
            max_iteration=5,
            tools=[
                # The preset overrides what the model passes and is hidden from it.
                agent_pb2.AgentTool(
                    provider="time",
                    name="current_time",
                    parameters=struct({"timezone": "Asia/Tokyo"}),
                )
            ],
        ),
    )


def show(event):
    """Prints one event; returns its kind."""
    kind = event.WhichOneof("event")
    if kind == "started":
        print(f"[started] {event.started.provider}/{event.started.model}")
    elif kind == "delta":
        print(event.delta.text, end="", flush=True)
    elif kind == "tool_call_delta":
        # A call's arguments as the model writes them: a preview; run only tool_started's.
        forming = event.tool_call_delta
        if forming.name:
            print(f"\n[forming] {forming.name} ", end="")
        print(forming.arguments_delta, end="", flush=True)
    elif kind == "reasoning_delta":
        # The model's reasoning, when the agent asks for it (seq 0 when not kept).
        print(f"\033[2m{event.reasoning_delta.text}\033[0m", end="", flush=True)
    elif kind == "tool_started":
        call = event.tool_started.tool_call
        print(f"\n[tool] {call.provider}/{call.name} {call.arguments}")
    elif kind == "tool_finished":
        call = event.tool_finished.tool_call
        print(f"[tool] -> {call.observation} ({call.meta.time_cost:.2f}s)")
    elif kind == "retry":
        print(f"\n[retry] {event.retry.code}: {event.retry.message}")
    elif kind == "end":
        usage = event.end.usage
        reason = agent_pb2.FinishReason.Name(event.end.finish_reason)
        print(
            f"\n[end] {reason}, {usage.prompt_tokens}+{usage.completion_tokens} tokens, "
            f"{usage.total_price or 0} {usage.currency}, {usage.latency:.2f}s"
        )
    elif kind == "error":
        print(f"\n[error] {event.error.code}: {event.error.message}")
    return kind


def run_and_read_back(agents):
    print("== a run, then its records")
    end = None
    # `timeout` is the call's deadline; give streaming calls one too.
    for event in agents.Run(run_request("What time is it in Tokyo?"), metadata=metadata(), timeout=60):
        if show(event) == "end":
            end = event
    assert end is not None, "the stream ended without an end event"

    message = agents.GetMessage(
        agent_pb2.GetMessageRequest(message_id=end.message_id), metadata=metadata(), timeout=10
    )
    assert message.status == agent_pb2.MESSAGE_STATUS_COMPLETED, message
    assert message.answer == end.end.answer
    thoughts = agents.ListThoughts(
        agent_pb2.ListThoughtsRequest(message_id=end.message_id), metadata=metadata(), timeout=10
    ).thoughts
    calls = [call for thought in thoughts for call in thought.tool_calls]
    assert calls, "the agent called the time tool"
    # The preset (a Struct) reached the tool: Tokyo time, whatever the model asked for.
    assert "JST" in calls[0].observation, calls[0].observation
    print(f"stored: {agent_pb2.MessageStatus.Name(message.status)}, "
          f"{len(thoughts)} thoughts, tool said {calls[0].observation!r}")
    return end.message_id


def deadline_then_attach(agents):
    print("== a deadline cancels the run; Attach replays what followed")
    message_id, last_seq = None, 0
    try:
        for event in agents.Run(run_request("What time is it?"), metadata=metadata(), timeout=0.5):
            message_id, last_seq = event.message_id, event.seq
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED, err
        print(f"deadline passed after event {last_seq}")
    assert message_id, "some events arrived before the deadline"
    events = list(
        agents.Attach(
            agent_pb2.AttachRequest(message_id=message_id, after_seq=last_seq),
            metadata=metadata(),
            timeout=60,
        )
    )
    for event in events:
        show(event)
    assert events[0].seq == last_seq + 1, "Attach resumes right after the last event seen"
    assert events[-1].end.finish_reason == agent_pb2.FINISH_REASON_CANCELLED, events[-1]


def cancel(agents):
    print("== Cancel")
    stream = agents.Run(run_request("Tell me the time, slowly."), metadata=metadata(), timeout=60)
    end = None
    asked_for = None
    for event in stream:
        kind = show(event)
        if kind == "delta" and end is None:
            asked_for = event.message_id
            agents.Cancel(
                agent_pb2.CancelRequest(message_id=event.message_id), metadata=metadata(), timeout=10
            )
            end = "asked"
        if kind == "end":
            end = event.end
    assert end is not None and end != "asked", "the cancelled run still ends with an end event"
    assert end.finish_reason == agent_pb2.FINISH_REASON_CANCELLED, end
    return asked_for


def list_runs(agents, first, cancelled):
    """The tenant's runs, newest first; a filter keeps only the cancelled ones."""
    print("== ListRuns")
    page = agents.ListRuns(agent_pb2.ListRunsRequest(page_size=100), metadata=metadata(), timeout=10)
    ids = [run.message_id for run in page.runs]
    assert cancelled in ids and first in ids, ids
    assert ids.index(cancelled) < ids.index(first), "newest first"
    summary = page.runs[ids.index(first)]
    assert summary.status == agent_pb2.MESSAGE_STATUS_COMPLETED, summary
    only_cancelled = agents.ListRuns(
        agent_pb2.ListRunsRequest(statuses=[agent_pb2.MESSAGE_STATUS_CANCELLED], page_size=100),
        metadata=metadata(),
        timeout=10,
    )
    assert all(run.status == agent_pb2.MESSAGE_STATUS_CANCELLED for run in only_cancelled.runs)
    assert cancelled in [run.message_id for run in only_cancelled.runs]
    newest = page.runs[0]
    print(f"listed {len(page.runs)} runs; the newest: {newest.query!r} "
          f"({agent_pb2.MessageStatus.Name(newest.status)})")


def main():
    with grpc.insecure_channel(ADDR) as channel:
        agents = agent_pb2_grpc.AgentServiceStub(channel)
        first = run_and_read_back(agents)
        deadline_then_attach(agents)
        cancelled = cancel(agents)
        list_runs(agents, first, cancelled)
    print("python example: ok")


if __name__ == "__main__":
    try:
        main()
    except grpc.RpcError as err:
        print(f"error: {err.code().name}: {err.details()}", file=sys.stderr)
        sys.exit(1)
