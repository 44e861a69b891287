"""Decodes messages herald sent with the CloudEvents Python SDK (the `cloudevents` package, v2 API).

herald's conformance tests (tests/conformance.rs) capture what herald really sent and feed it here:
one JSON document on stdin,

    {"binding": "http" | "kafka",
     "messages": [{"headers": [[name, base64 value], ...], "body": base64, "key": base64 | null}]}

and one JSON document on stdout,

    {"sdk": "cloudevents 2.2.0",
     "messages": [[{"attributes": {...}, "data": ..., "data_type": "json" | "text" | "bytes"}
                   | {"error": "..."}, ...], ...]}

one list of events per message (a batch holds several). The SDK picks the content mode itself
(`from_http`, `from_kafka`), as a consumer calling it would. It has no reader for HTTP batches, so
a batch (content type `application/cloudevents-batch+json`, the HTTP binding's 3.3) is split into its
JSON-format events, each read by the SDK's structured reader. `time` is printed as ISO 8601 with
its offset (`datetime.isoformat`); everything else as the SDK returned it.
"""

import base64
import json
import sys
from datetime import datetime
from importlib.metadata import version

from cloudevents.core.bindings import http, kafka
from cloudevents.core.formats.json import JSONFormat


def plain(event):
    attributes = {}
    for name, value in event.get_attributes().items():
        attributes[name] = value.isoformat() if isinstance(value, datetime) else value
    data = event.get_data()
    if isinstance(data, (bytes, bytearray)):
        return {"attributes": attributes, "data": base64.b64encode(data).decode(), "data_type": "bytes"}
    if isinstance(data, str):
        return {"attributes": attributes, "data": data, "data_type": "text"}
    return {"attributes": attributes, "data": data, "data_type": "json"}


def attempt(read):
    try:
        return [plain(event) for event in read()]
    except Exception as error:  # the test shows why a message did not decode
        return [{"error": f"{type(error).__name__}: {error}"}]


def http_events(message):
    # HTTP header values are ASCII (herald percent-encodes); latin-1 keeps any other byte visible.
    headers = {name: base64.b64decode(value).decode("latin-1") for name, value in message["headers"]}
    body = base64.b64decode(message["body"])
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    if content_type.lower().startswith("application/cloudevents-batch"):
        return [
            http.from_structured(
                http.HTTPMessage(
                    headers={"content-type": JSONFormat.CONTENT_TYPE},
                    body=json.dumps(item).encode(),
                ),
                JSONFormat(),
            )
            for item in json.loads(body)
        ]
    return [http.from_http(http.HTTPMessage(headers=headers, body=body), JSONFormat())]


def kafka_events(message):
    headers = {name: base64.b64decode(value) for name, value in message["headers"]}
    key = None if message.get("key") is None else base64.b64decode(message["key"])
    value = base64.b64decode(message["body"])
    return [kafka.from_kafka(kafka.KafkaMessage(headers=headers, key=key, value=value), JSONFormat())]


def main():
    request = json.load(sys.stdin)
    read = {"http": http_events, "kafka": kafka_events}[request["binding"]]
    out = {
        "sdk": f"cloudevents {version('cloudevents')}",
        "messages": [attempt(lambda m=m: read(m)) for m in request["messages"]],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
