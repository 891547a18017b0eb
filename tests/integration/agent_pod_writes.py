"""Run inside the agent's pod (``python3 -c <this file> OWN_NODE OTHER_NODE``): three Node
writes with the pod's own projected ServiceAccount token, through the ``kubernetes``
Service, as the agent makes them. Prints ``{"case": [HTTP status, message]}`` as JSON.
Standard library only (the image's python3). Not a test module: tests read this file."""

import json
import os
import ssl
import sys
import urllib.error
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
own, other = sys.argv[1:3]
base = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
with open(f"{SA}/token") as f:
    token = f.read().strip()


def call(method, path, body=None):
    req = urllib.request.Request(
        base + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "Content-Type": "application/merge-patch+json",
        },
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def patch_node(name, edit):
    """Read-modify-write with the resourceVersion as a precondition, retried on 409."""
    for _ in range(20):
        status, node = call("GET", f"/api/v1/nodes/{name}")
        if status != 200:
            return status, node.get("message", "")
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
        edit(node, body)
        status, out = call("PATCH", f"/api/v1/nodes/{name}", body)
        if status != 409:
            return status, "" if status == 200 else out.get("message", "")
    return 409, "conflict"


def own_annotation(node, body):
    key = "fleetmedic.io/last-results"
    current = (node["metadata"].get("annotations") or {}).get(key) or "{}"
    body["metadata"]["annotations"] = {key: current}


def foreign_taint(node, body):
    taints = list(node["spec"].get("taints") or [])
    taints.append({"key": "example.com/foreign", "value": "x", "effect": "NoSchedule"})
    body["spec"] = {"taints": taints}


def other_node(node, body):
    body["metadata"]["annotations"] = {"fleetmedic.io/strikes": '{"gpu": 3}'}


print(
    json.dumps(
        {
            "own_annotation": patch_node(own, own_annotation),
            "other_node": patch_node(other, other_node),
            "foreign_taint": patch_node(own, foreign_taint),
        }
    )
)
