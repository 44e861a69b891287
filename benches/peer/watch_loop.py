#!/usr/bin/env python3
"""The peer of herald's benchmarks: the watch loop a user of the official Python client writes.

As the client's docs show it: CustomObjectsApi list, then watch.Watch().stream from the list's
resourceVersion; one CloudEvent JSON line per event to a file; the resourceVersion saved to a
checkpoint file every 1,000 events (and after the list), and read back on start, so a restart
resumes the watch instead of listing again. It journals nothing and detects no missed deletions.

Usage: watch_loop.py KUBECONFIG GROUP VERSION NAMESPACE PLURAL OUT.jsonl CHECKPOINT
Needs Debian's python3-kubernetes (apt-get install python3-kubernetes).
"""

import datetime
import json
import os
import sys
import uuid

from kubernetes import client, config, watch

OPS = {"ADDED": "created", "MODIFIED": "updated", "DELETED": "deleted"}


def save(path, rv):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(rv)
    os.replace(tmp, path)


def main():
    kubeconfig, group, version, namespace, plural, out_path, checkpoint = sys.argv[1:8]
    config.load_kube_config(config_file=kubeconfig)
    api = client.CustomObjectsApi()
    source = f"k8s://bench/{group}/{plural}"

    def emit(out, op, obj):
        meta = obj["metadata"]
        event = {
            "specversion": "1.0",
            "id": f"{meta['uid']}:{meta['resourceVersion']}:{op}",
            "source": source,
            "type": f"dev.herald.resource.{op}",
            "subject": f"{meta.get('namespace', '')}/{meta['name']}",
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "datacontenttype": "application/json",
            "data": {"op": op, "object": obj},
        }
        out.write(json.dumps(event) + "\n")

    rv = None
    if os.path.exists(checkpoint):
        with open(checkpoint) as f:
            rv = f.read().strip() or None
    # Line-buffered: each event reaches the file as it is seen, as a sink would send it.
    with open(out_path, "a", buffering=1) as out:
        if rv is None:
            listed = api.list_namespaced_custom_object(group, version, namespace, plural)
            for obj in listed["items"]:
                emit(out, "created", obj)
            rv = listed["metadata"]["resourceVersion"]
            save(checkpoint, rv)
        seen = 0
        w = watch.Watch()
        for event in w.stream(
            api.list_namespaced_custom_object,
            group,
            version,
            namespace,
            plural,
            resource_version=rv,
        ):
            op = OPS.get(event["type"])
            if op is None:
                continue
            obj = event["object"]
            emit(out, op, obj)
            seen += 1
            if seen % 1000 == 0:
                save(checkpoint, obj["metadata"]["resourceVersion"])


if __name__ == "__main__":
    main()
