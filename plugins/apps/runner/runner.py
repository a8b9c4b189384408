# Hangar's launcher for deployed Python apps: the same job and answer as runner.mjs, run inside
# the sandbox by the deployment's own virtual environment as
#
#   /srv/venv/bin/python runner.py <job file>
#
# The registry is the `kernel` package's (kernel.app_framework.app_registry), which
# `kernel.App(name)` fills when the entrypoint is imported. Handlers may be plain functions or
# coroutines. The one result line goes to fd 3; the app's stdout/stderr are the invocation's logs.
import asyncio
import importlib.util
import inspect
import json
import os
import socket
import sys
import threading
import traceback

with open(sys.argv[1], encoding="utf-8") as f:
    job = json.load(f)
answered = False


def answer(result):
    global answered
    if answered:
        return
    answered = True
    os.write(3, (json.dumps(result) + "\n").encode())


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# As in runner.mjs: the API is served on a unix socket in the instance folder; listening on the
# server's port inside makes KERNEL_BASE_URL and the browser URLs work unchanged. A taken port
# means that address already reaches the server.
def forward_api():
    if not job.get("api_socket") or not job.get("api_port"):
        return
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", int(job["api_port"])))
    except OSError:
        listener.close()
        return
    listener.listen(64)

    def accept():
        while True:
            client, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(job["api_socket"])
            except OSError:
                client.close()
                upstream.close()
                continue
            threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def main():
    forward_api()
    app_dir = job["app_dir"]
    entry = os.path.join(app_dir, job["entrypoint"])
    os.chdir(app_dir)
    sys.path.insert(0, os.path.dirname(entry))
    spec = importlib.util.spec_from_file_location("__kernel_app__", entry)
    module = importlib.util.module_from_spec(spec)
    sys.modules["__kernel_app__"] = module
    spec.loader.exec_module(module)
    try:
        from kernel.app_framework import app_registry
    except ImportError:
        raise RuntimeError("the kernel package is not installed: add it to requirements.txt or pyproject.toml")
    apps = app_registry.get_apps()
    if job["mode"] == "wait":
        # Prepared ahead (a warm sandbox): the invocation's job comes on fd 4, written and closed
        # by the agent when one arrives.
        chunks = []
        while chunk := os.read(4, 65536):
            chunks.append(chunk)
        job.update(json.loads(b"".join(chunks)))
    if job["mode"] == "describe":
        answer({"ok": True, "apps": [{"name": a.name, "actions": [{"name": n} for n in a.actions]} for a in apps]})
        return
    app = app_registry.get_app_by_name(job.get("app_name"))
    if app is None:
        raise RuntimeError(f"app {job.get('app_name')} is not registered by {job['entrypoint']}")
    action = app.get_action(job.get("action_name"))
    if action is None:
        raise RuntimeError(f"action {job.get('action_name')} not found in app {app.name}")
    from kernel.app_framework import KernelContext

    payload = job.get("payload")
    args = [KernelContext(invocation_id=job.get("invocation_id", ""))]
    if payload not in (None, ""):
        args.append(json.loads(payload))
    elif len(inspect.signature(action.handler.__wrapped__).parameters) == 2:
        args.append(None)
    result = action.handler(*args)
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    answer({"ok": True, "output": json.dumps(result)})


async def _await(awaitable):
    return await awaitable


if __name__ == "__main__":
    try:
        main()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # daemon forwarding threads must not hold the process open
    except BaseException as err:  # the action's own failure, reported as the invocation's
        traceback.print_exc()
        sys.stderr.flush()
        answer({"ok": False, "error": str(err) or type(err).__name__})
        os._exit(1)
