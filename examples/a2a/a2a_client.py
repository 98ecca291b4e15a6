"""Drives agent-runner's A2A service with the official A2A Python SDK (a2a-sdk, gRPC),
changing nothing on the SDK's side: fetch an agent's card, send, stream, continue a
context, subscribe, cancel, list (by context and across them), and answer an approval through the tool-calls extension.

AGENT_RUNNER_CARDS is the metrics listener serving the cards (host:port); the stored agents
`helper` and `gatekeeper` exist (examples/run.sh creates them from the JSON files here).
"""

import asyncio
import os
import uuid

import grpc
import httpx
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types import a2a_pb2 as a2a
from google.protobuf import json_format, struct_pb2

CARDS = os.environ["AGENT_RUNNER_CARDS"]
EXTENSION = "urn:agentrunner:a2a:tool-calls:v1"


async def card_of(agent_id):
    async with httpx.AsyncClient() as http:
        resolver = A2ACardResolver(http, f"http://{CARDS}/agents/{agent_id}")
        return await resolver.get_agent_card()


def client_for(card, streaming=True):
    config = ClientConfig(
        streaming=streaming,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    return ClientFactory(config).create(card)


def user_message(text, context_id="", task_id=""):
    return a2a.Message(
        message_id=str(uuid.uuid4()),
        role=a2a.ROLE_USER,
        parts=[a2a.Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )


def answer_of(events):
    """The answer as the artifact updates assemble it."""
    text = ""
    for event in events:
        if event.HasField("artifact_update"):
            update = event.artifact_update
            if not update.append:
                text = ""
            text += "".join(part.text for part in update.artifact.parts)
    return text


def last_state(events):
    for event in reversed(events):
        if event.HasField("status_update"):
            return event.status_update.status.state
        if event.HasField("task"):
            return event.task.status.state
    raise AssertionError("no state in the events")


async def collect(stream):
    return [event async for event in stream]


async def main():
    card = await card_of("helper")
    interface = card.supported_interfaces[0]
    assert interface.protocol_binding == "GRPC" and interface.tenant == "helper", card
    print(f"card: {card.name} at {interface.url}, routing {interface.tenant!r}")

    # Streamed: the task first, then the answer as appends to one artifact, then its end.
    client = client_for(card)
    events = await collect(
        client.send_message(a2a.SendMessageRequest(message=user_message("What time is it?")))
    )
    assert events[0].HasField("task"), events[0]
    assert last_state(events) == a2a.TASK_STATE_COMPLETED, events[-1]
    first_task = events[0].task
    answer = answer_of(events)
    assert answer, events
    print(f"streamed: {answer!r}")

    # Continued in its context: a new task of the same context.
    events = await collect(
        client.send_message(
            a2a.SendMessageRequest(
                message=user_message("And again?", context_id=first_task.context_id)
            )
        )
    )
    second = events[0].task
    assert second.context_id == first_task.context_id and second.id != first_task.id
    print(f"continued: context {second.context_id}, task {second.id}")

    # Blocking (no streaming): the completed task, its answer as the artifact.
    blocking = client_for(card, streaming=False)
    events = await collect(blocking.send_message(a2a.SendMessageRequest(message=user_message("Hi"))))
    task = events[0].task
    assert task.status.state == a2a.TASK_STATE_COMPLETED, task
    print(f"blocking: {''.join(p.text for p in task.artifacts[0].parts)!r}")

    # Listed, newest first.
    listed = await client.list_tasks(
        a2a.ListTasksRequest(context_id=first_task.context_id, include_artifacts=True)
    )
    assert [t.id for t in listed.tasks] == [second.id, first_task.id], listed
    print(f"listed: {len(listed.tasks)} tasks of the context")
    everything = await client.list_tasks(a2a.ListTasksRequest(page_size=2))
    assert [t.id for t in everything.tasks] == [task.id, second.id], everything
    assert everything.next_page_token, everything
    print("listed: the agent's tasks of every context, newest first, a page at a time")

    # Started without waiting, subscribed to, then cancelled.
    polling = ClientFactory(
        ClientConfig(
            streaming=False,
            polling=True,
            supported_protocol_bindings=["GRPC"],
            grpc_channel_factory=grpc.aio.insecure_channel,
        )
    ).create(card)
    events = await collect(
        polling.send_message(a2a.SendMessageRequest(message=user_message("Tell a long story.")))
    )
    running = events[0].task
    subscription = client.subscribe(a2a.SubscribeToTaskRequest(id=running.id))
    seen = await subscription.__anext__()
    assert seen.HasField("task"), seen
    cancelled = await client.cancel_task(a2a.CancelTaskRequest(id=running.id))
    assert cancelled.status.state == a2a.TASK_STATE_CANCELED, cancelled
    rest = await collect(subscription)
    assert last_state(rest) == a2a.TASK_STATE_CANCELED, rest
    print(f"cancelled: {running.id}, the subscriber saw it")

    # An agent with approvals: the extension is required, and carries the decision.
    gate_card = await card_of("gatekeeper")
    assert gate_card.capabilities.extensions[0].required, gate_card
    gatekeeper = client_for(gate_card, streaming=False)
    try:
        await collect(gatekeeper.send_message(a2a.SendMessageRequest(message=user_message("Time?"))))
        raise AssertionError("a client without the extension was served")
    except Exception as err:  # the SDK's ExtensionSupportRequiredError
        assert type(err).__name__ == "ExtensionSupportRequiredError", repr(err)
        print(f"refused without the extension: {type(err).__name__}")
    context = ClientCallContext(
        service_parameters=ServiceParametersFactory.create([with_a2a_extensions([EXTENSION])])
    )
    events = await collect(
        gatekeeper.send_message(
            a2a.SendMessageRequest(message=user_message("Time?")), context=context
        )
    )
    waiting = events[0].task
    assert waiting.status.state == a2a.TASK_STATE_INPUT_REQUIRED, waiting
    asked = json_format.MessageToDict(waiting.status.message.parts[0].data)
    call_id = asked["approval_required"][0]["id"]
    decision = user_message("", context_id=waiting.context_id, task_id=waiting.id)
    del decision.parts[:]
    decision.parts.append(
        a2a.Part(
            data=json_format.ParseDict(
                {"decisions": [{"tool_call_id": call_id, "approve": True}]},
                struct_pb2.Value(),
            )
        )
    )
    events = await collect(
        gatekeeper.send_message(a2a.SendMessageRequest(message=decision), context=context)
    )
    done = events[0].task
    assert done.status.state == a2a.TASK_STATE_COMPLETED, done
    print(f"approved through the extension: {done.status.state == a2a.TASK_STATE_COMPLETED}")
    print("a2a example: ok")


asyncio.run(main())
