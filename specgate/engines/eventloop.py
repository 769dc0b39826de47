"""An asyncio loop on a thread of its own, for synchronous callers of asynchronous clients: vLLM's
AsyncLLM (engine.py), a server's streaming HTTP client (endpoint.py), a fake engine (testing.py)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from specgate.lifetime.watchdog import Watch, wait


class EventLoopThread:
    """An asyncio loop on its own thread: vLLM's AsyncLLM lives on it, the (synchronous) tests
    submit coroutines to it. One per engine, stopped with the engine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="specgate-engine-loop", daemon=True)
        self.thread.start()

    def run(self, coro, watch: Watch | None = None, what: str = ""):
        """The coroutine's result, run on the loop; with a watch, Overdue when a deadline passes.
        On any way out but the result (Overdue, Ctrl-C) the coroutine is cancelled."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return wait(future, watch, what)
        except BaseException:
            future.cancel()
            raise

    def close(self, wait_s: float = 10.0) -> None:
        """Cancel what is pending and stop the loop. A loop thread stuck in a synchronous call (an
        engine boot that was given up) is left to finish on its own: it is a daemon thread."""

        async def cancel_pending():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_pending(), self.loop).result(timeout=wait_s)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=wait_s)
        if not self.thread.is_alive():
            self.loop.close()
