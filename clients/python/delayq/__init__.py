"""delayq -- a Python client and worker for the delayq delay-queue server, on redis-py.

    from datetime import timedelta
    from delayq import Client, Worker

    q = Client(port=7700)
    q.add("orders", "o-42", b'{"order": 42}', delay=timedelta(minutes=30))

    w = Worker(q, concurrency=8)

    @w.handler("orders")
    def cancel_if_unpaid(job):
        ...

    w.run(install_signals=True)

See docs/workers.md.
"""

from .client import (AuthError, Backoff, BusyError, Client, ConnectionFailed, DelayqError,
                     ExistsError, FullError, Job, NotReservedError, Stats, StoreIOError,
                     Timeout, TooBigError, UnavailableError)
from .worker import Retry, Task, Worker

__all__ = ["AuthError", "Backoff", "BusyError", "Client", "ConnectionFailed", "DelayqError",
           "ExistsError", "FullError", "Job", "NotReservedError", "Retry", "Stats",
           "StoreIOError", "Task", "Timeout", "TooBigError", "UnavailableError", "Worker"]
