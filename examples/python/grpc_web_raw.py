"""gRPC-Web by hand: a Run streamed to its end over HTTP/1.1 with nothing but the standard
library and the protobuf messages generated from the service's protos (no gRPC library).

Each message travels in a frame: a flag byte (0 for a message, 0x80 for the trailers), its
length as four big-endian bytes, then the bytes. The call's status comes in the trailer
frame, or in the response headers when the call fails before any message.

    ./generate.sh && AGENT_RUNNER_ADDR=127.0.0.1:50051 python grpc_web_raw.py

Exits non-zero when the service does not behave as shown.
"""

import http.client
import os
import struct
import sys

from agentrunner.v1 import agent_pb2

ADDR = os.environ.get("AGENT_RUNNER_ADDR", "127.0.0.1:50051")
MODEL = os.environ.get("AGENT_RUNNER_MODEL", "openai/gpt-4o-mini")


def call(path, request, tenant="examples"):
    """Posts one framed request; yields ('message', bytes) per message, then ('status', code, text)."""
    host, port = ADDR.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    body = request.SerializeToString()
    connection.request(
        "POST",
        path,
        body=struct.pack(">BI", 0, len(body)) + body,
        headers={
            "content-type": "application/grpc-web+proto",
            "x-grpc-web": "1",
            "x-tenant-id": tenant,
        },
    )
    response = connection.getresponse()
    if response.status != 200:
        sys.exit(f"HTTP {response.status}: {response.read()!r}")
    trailers = {}
    while True:
        head = response.read(5)
        if len(head) < 5:
            break
        flag, length = struct.unpack(">BI", head)
        payload = response.read(length)
        if flag & 0x80:
            for line in payload.decode().split("\r\n"):
                if ":" in line:
                    name, value = line.split(":", 1)
                    trailers[name.strip().lower()] = value.strip()
        else:
            yield ("message", payload)
    code = trailers.get("grpc-status", response.getheader("grpc-status", "2"))
    text = trailers.get("grpc-message", response.getheader("grpc-message", ""))
    yield ("status", int(code), text)
    connection.close()


def main():
    provider, name = MODEL.split("/", 1)
    request = agent_pb2.RunRequest(
        query="What time is it?",
        agent=agent_pb2.AgentConfig(model=agent_pb2.ModelConfig(provider=provider, name=name)),
    )
    events, status = [], None
    for item in call("/agentrunner.v1.AgentService/Run", request):
        if item[0] == "message":
            event = agent_pb2.RunEvent.FromString(item[1])
            events.append(event)
            print(f"#{event.seq} {event.WhichOneof('event')}")
        else:
            status = item[1]
    if status != 0 or not events or events[-1].WhichOneof("event") != "end":
        sys.exit(f"the run did not stream to its end (status {status})")
    print(f"answer: {events[-1].end.answer!r}")

    attach = agent_pb2.AttachRequest(message_id=events[0].message_id)
    foreign = list(call("/agentrunner.v1.AgentService/Attach", attach, tenant="someone-else"))
    if foreign[-1][1] != 5 or len(foreign) != 1:
        sys.exit(f"another tenant's Attach was not NOT_FOUND: {foreign[-1]}")
    print("another tenant's Attach: NOT_FOUND, in the trailers")


if __name__ == "__main__":
    main()
