"""The Ray Job Submission REST API, served by the federation (so `ray job submit` works unchanged).

HTTP in, controller calls out. Errors a client can fix are 4xx with a message that names the
problem; the stock CLI prints that message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from aiohttp import WSMsgType, web
from prometheus_client import CollectorRegistry, generate_latest

from federation.errors import BadSubmission, FederationError
from federation.runtime.access import Access, Grant
from federation.runtime.controller import Controller
from federation.runtime.metrics import FederationCollector
from federation.runtime.packages import MAX_BYTES, package_name
from federation.runtime.sites import TERMINAL, SiteUnavailable

log = logging.getLogger(__name__)

WAKE = web.AppKey("wake", asyncio.Event)  # set by a submission to run the next cycle early

MAX_JSON_BYTES = 16 * 1024**2  # a submission's JSON (uploads of working_dir packages go to /api/packages/)
RAY_API_VERSION = "4"  # ray.dashboard.modules.version.CURRENT_VERSION for Ray 2.60


def make_app(ctl: Controller, tokens: dict[str, Grant] | None = None) -> web.Application:
    access = Access(tokens)

    @web.middleware
    async def errors(req: web.Request, handler):
        """A BadSubmission is the client's to fix (its status and message); anything else is ours:
        logged with its traceback, and answered in one line."""
        try:
            return await handler(req)
        except BadSubmission as e:
            return web.Response(status=e.status, text=str(e))
        except SiteUnavailable as e:  # the site of the job cannot be asked now: nothing changed
            return web.Response(status=503, text=f"{e}; nothing was changed there, try again")
        except web.HTTPException:
            raise
        except Exception as e:
            log.error(f"API {req.method} {req.path} failed: {type(e).__name__}: {e}", exc_info=True)
            return web.Response(status=500, text=f"internal error ({type(e).__name__}); the federation's log has the details")

    app = web.Application(client_max_size=MAX_BYTES, middlewares=[errors])
    routes = web.RouteTableDef()

    def job_or_404(req: web.Request, scope: str):
        """The job the path names, if the caller may `scope` it (404 before 403 would tell a
        stranger which ids exist, so the token is checked first)."""
        access.who(req.headers.get("Authorization"))
        row = ctl.store.get(req.match_info["job_id"])
        if row is None:
            raise web.HTTPNotFound(text=f"Job {req.match_info['job_id']} does not exist")
        access.require(req.headers.get("Authorization"), row.request.get("queue"), scope)
        return row

    def run(fn, *args):
        return asyncio.get_running_loop().run_in_executor(None, fn, *args)

    page = (Path(__file__).resolve().parent.parent / "data" / "status.html").read_bytes()

    @routes.get("/")
    async def status_page(_: web.Request) -> web.Response:
        """A page for people: the status document, drawn and refreshed in the browser (which
        asks for a token where the federation has them; the page itself holds no data)."""
        return web.Response(body=page, content_type="text/html", charset="utf-8")

    @routes.get("/api/version")
    async def version(_: web.Request) -> web.Response:
        import ray

        return web.json_response({"version": RAY_API_VERSION, "ray_version": ray.__version__, "ray_commit": ray.__commit__, "session_name": f"federation-{ctl.fed.name}"})

    @routes.post("/api/jobs/")
    async def submit(req: web.Request) -> web.Response:
        access.who(req.headers.get("Authorization"))  # who first: a stranger learns nothing from the body's errors
        body = await read_json(req)
        wanted = body.get("metadata", {}).get("queue") if isinstance(body, dict) and isinstance(body.get("metadata"), dict) else None
        access.require(req.headers.get("Authorization"), str(wanted) if wanted is not None else None, "write")
        row = await run(ctl.submit, body)
        if (wake := req.app.get(WAKE)) is not None:
            wake.set()  # a cycle soon, not a whole cycle_s later
        return web.json_response({"job_id": row.id, "submission_id": row.id})

    @routes.get("/api/packages/{protocol}/{name}")
    async def has_package(req: web.Request) -> web.Response:
        access.require(req.headers.get("Authorization"), None, "write")
        name = package_name(req.match_info["protocol"], req.match_info["name"])
        return web.Response() if ctl.store.has_package(name) else web.Response(status=404, text=f"Package {name} does not exist")

    @routes.put("/api/packages/{protocol}/{name}")
    async def put_package(req: web.Request) -> web.Response:
        access.require(req.headers.get("Authorization"), None, "write")
        name = package_name(req.match_info["protocol"], req.match_info["name"])
        data = await req.read()
        await run(ctl.store.put_package, name, data, ctl.clock())
        return web.Response()

    @routes.get("/api/jobs/")
    async def list_jobs(req: web.Request) -> web.Response:
        grant = access.who(req.headers.get("Authorization"))
        return web.json_response([ctl.job_details(r) for r in ctl.store.jobs() if access.readable(grant, r.request.get("queue"))])

    @routes.get("/api/jobs/{job_id}")
    async def get_job(req: web.Request) -> web.Response:
        row = job_or_404(req, "read")
        await run(ctl.refresh_site_status, row)
        return web.json_response(ctl.job_details(row))

    @routes.get("/api/jobs/{job_id}/logs")
    async def logs(req: web.Request) -> web.Response:
        row = job_or_404(req, "read")
        return web.json_response({"logs": await run(ctl.logs, row)})

    @routes.get("/api/jobs/{job_id}/logs/tail")
    async def tail(req: web.Request) -> web.StreamResponse:
        job_or_404(req, "read")
        ws = web.WebSocketResponse()
        await ws.prepare(req)
        sent = 0
        while not ws.closed:
            row = ctl.store.get(req.match_info["job_id"])
            text = await run(ctl.logs, row)
            if len(text) > sent:
                await ws.send_str(text[sent:])
                sent = len(text)
            if row.status in TERMINAL:
                break
            try:
                msg = await ws.receive(timeout=0.5)
                if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.ERROR):
                    break
            except TimeoutError:
                pass
        await ws.close()
        return ws

    @routes.post("/api/jobs/{job_id}/stop")
    async def stop(req: web.Request) -> web.Response:
        job_or_404(req, "write")
        return web.json_response({"stopped": await run(ctl.stop, req.match_info["job_id"])})

    @routes.delete("/api/jobs/{job_id}")
    async def delete(req: web.Request) -> web.Response:
        row = job_or_404(req, "write")
        if row.status not in TERMINAL:
            return web.Response(status=400, text=f"job {row.id} is {row.status}; stop it before deleting it")
        ctl.store.delete(row.id)
        return web.json_response({"deleted": True})

    @routes.get("/api/federation/status")
    async def fed_status(req: web.Request) -> web.Response:
        grant = access.who(req.headers.get("Authorization"))
        doc = ctl.status()
        if grant is not None and not grant.admin:  # the queues' totals are everyone's; the jobs only their queues'
            doc["pending"] = [p for p in doc["pending"] if grant.allows(p["queue"], "read")]
            doc["running"] = [r for r in doc["running"] if grant.allows(r.get("queue"), "read")]
        return web.json_response(doc)

    @routes.post("/api/federation/queues/{queue}/{action:pause|drain|resume}")
    async def stop_queue(req: web.Request) -> web.Response:
        """An operator pauses, drains or resumes a queue: whoever may write its jobs may."""
        queue, action = req.match_info["queue"], req.match_info["action"]
        access.require(req.headers.get("Authorization"), queue, "write")
        return web.json_response(await run(ctl.stop_queue, queue, None if action == "resume" else action))

    @routes.get("/api/federation/jobs/{job_id}/explain")
    async def explain(req: web.Request) -> web.Response:
        row = job_or_404(req, "read")
        return web.json_response({"job": row.id, "status": row.status, "reason": row.reason, "message": row.message, "site": row.site, "placements": row.placements})

    @routes.get("/metrics")
    async def metrics(req: web.Request) -> web.Response:
        access.who(req.headers.get("Authorization"))  # any token (Prometheus: `authorization: {credentials: ...}`)
        reg = CollectorRegistry()
        reg.register(FederationCollector(ctl))
        return web.Response(body=generate_latest(reg), content_type="text/plain")

    app.add_routes(routes)
    return app


async def read_json(req: web.Request):
    """The request's JSON body; a 400 naming what is wrong with it (not JSON, nested too deep, a
    NaN or an infinity, which JSON does not have)."""
    def constant(name: str):
        raise BadSubmission(f"the request body has {name}, which is not JSON; send a finite number or a string")

    if (req.content_length or 0) > MAX_JSON_BYTES:
        raise BadSubmission(f"the request body is {req.content_length:,} bytes; a job submission is at most {MAX_JSON_BYTES:,}", status=413)
    raw = bytearray()
    while len(raw) <= MAX_JSON_BYTES and (chunk := await req.content.read(MAX_JSON_BYTES + 1 - len(raw))):
        raw += chunk
    if len(raw) > MAX_JSON_BYTES:
        raise BadSubmission(f"the request body is over {MAX_JSON_BYTES:,} bytes, the most a job submission may be", status=413)
    try:
        return json.loads(bytes(raw).decode("utf-8"), parse_constant=constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadSubmission(f"the request body is not JSON: {e}") from None
    except RecursionError:
        raise BadSubmission("the request body is nested too deeply") from None


async def serve(ctl: Controller, host: str, port: int, cycle_s: float = 1.0, tokens: dict[str, Grant] | None = None) -> web.AppRunner:
    """Start the API and the cycle loop on the running event loop; returns the runner to clean up."""
    app = make_app(ctl, tokens)
    wake = app[WAKE] = asyncio.Event()

    async def cycle_loop(_app):
        async def loop():
            ctl.health.stall_after_s = max(30.0, 10 * cycle_s)
            while True:
                began = time.perf_counter()
                wake.clear()  # submissions from here on wake the next cycle
                try:
                    await asyncio.get_running_loop().run_in_executor(None, ctl.tick)
                    ctl.health.ok(ctl.clock())
                except Exception as e:  # the loop must outlive any fault: seen, counted, backed off, tried again
                    ctl.health.failed(ctl.clock(), "cycle", f"{type(e).__name__}: {e}")
                    pause = ctl.health.backoff_s(cycle_s)
                    log.error(f"cycle failed ({ctl.health.consecutive_failures} in a row; next try in {pause:g} s): "
                              f"{type(e).__name__}: {e}", exc_info=True)
                    await asyncio.sleep(pause)
                    continue
                took = time.perf_counter() - began
                try:
                    await asyncio.wait_for(wake.wait(), cycle_s)
                except TimeoutError:
                    continue
                # woken by a submission: rest at least as long as the cycle took (at most half
                # the time goes to cycles during a stream of submissions) and gather the others
                await asyncio.sleep(min(cycle_s, max(0.02, took)))

        task = asyncio.create_task(loop())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(cycle_loop)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


class Serving:
    """The API and the cycle loop on an event loop of their own, in a thread: how the queue
    controller actor, the demo and the tests run them beside their own work."""

    def __init__(self, ctl: Controller, host: str, port: int, cycle_s: float = 1.0, tokens: dict[str, Grant] | None = None):
        self.url = f"http://{host}:{port}"
        self.loop = asyncio.new_event_loop()
        started: Future = Future()

        async def start():
            try:
                started.set_result(await serve(ctl, host, port, cycle_s, tokens))
            except OSError as e:  # the port is taken, say
                started.set_exception(FederationError(f"api.listen: cannot listen on {host}:{port}: {e.strerror or e}"))

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.create_task(start())
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="federation-api", daemon=True)
        self.thread.start()
        self.runner = started.result(60)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
