"""One Helm release action through Helm's own Go library (helm_sdkpy), for tests/helm_install.rs.

Reads a JSON request on stdin:
  {"kubeconfig", "namespace", "release", "chart", "action": "install"|"upgrade"|"uninstall"|"list",
   "values": {...}, "server_side": true|false|"auto"}
and prints {"ok": true, "result": ...} or {"ok": false, "error": "..."} on stdout. Never waits for
readiness: the simulator runs no controllers.
"""

import asyncio
import json
import sys

import helm_sdkpy as helm


async def run(req):
    config = helm.Configuration(namespace=req["namespace"], kubeconfig=req["kubeconfig"])
    action = req["action"]
    values = req.get("values") or None
    if action == "install":
        return await helm.Install(config).run(
            req["release"], req["chart"], values=values, wait=False, timeout=60,
            server_side_apply=req.get("server_side", True))
    if action == "upgrade":
        return await helm.Upgrade(config).run(
            req["release"], req["chart"], values=values, wait=False, timeout=60,
            server_side_apply=req.get("server_side", "auto"))
    if action == "uninstall":
        return await helm.Uninstall(config).run(req["release"], wait=False, timeout=60)
    if action == "list":
        return await helm.List(config).run()
    raise ValueError(f"unknown action {action!r}")


def main():
    req = json.load(sys.stdin)
    try:
        result = asyncio.run(run(req))
    except helm.HelmError as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return
    print(json.dumps({"ok": True, "result": result}, default=str))


if __name__ == "__main__":
    main()
