"""Merges concurrent requests into model calls, as `tensorflow_model_server --enable_batching`
does, and runs the calls off the event loop. Knows nothing of HTTP or TensorFlow: the model is
any function `run_batch(key, instances) -> one result per instance`.

Requests with the same key (a signature) wait in one queue. A call takes the oldest waiting
instances, up to `max_batch_size`, once that many are waiting or the oldest has waited
`batch_timeout_s`; a request with more instances than that is split across calls, and its
results come back in order. Calls run one at a time in one worker thread: the model already
uses every core inside a call, and while it runs the next batch fills. Instances waiting in all
queues together are bounded by `max_enqueued_instances`; past that a request is refused with
QueueFullError at once rather than waiting without end.

A call that fails with one of `request_errors` (an error one request's input causes, such as a
too-long input, or one that fewer instances may avoid, such as running out of memory) is run
again request by request, so only a request that fails alone gets the error. `in_request(error,
offset)` gives such an error of a call on a request's instances from `offset` on as the request
sees it (an error naming an instance by its index in the call: by its index in the request).
"""

import asyncio
import collections
import concurrent.futures
import dataclasses


class QueueFullError(Exception):
    """The request would take the waiting instances past `max_enqueued_instances`."""


@dataclasses.dataclass(frozen=True)
class BatchingOptions:
    max_batch_size: int = 32
    batch_timeout_s: float = 0.005
    max_enqueued_instances: int = 1024


class _Request:
    """One caller's instances, the results gathered so far, and where the caller waits."""

    def __init__(self, instances, future, enqueued_at):
        self.instances = instances
        self.future = future
        self.enqueued_at = enqueued_at
        self.results = [None] * len(instances)
        self.taken = 0  # instances handed to calls so far
        self.answered = 0

    def fail(self, error):
        if not self.future.done():
            self.future.set_exception(error)


class _Queue:
    """The requests waiting for one key, oldest first."""

    def __init__(self):
        self.requests = collections.deque()
        self.waiting = 0  # instances not yet taken into a call
        self.arrived = asyncio.Event()


class RequestBatcher:
    """`await submit(key, instances)` gives `run_batch`'s results for `instances`, in order,
    from calls shared with concurrent requests of the same key. Use within one event loop;
    `close()` when done."""

    def __init__(self, run_batch, options=BatchingOptions(), request_errors=(),
                 in_request=lambda error, offset: error):
        self.run_batch = run_batch
        self.options = options
        self.request_errors = tuple(request_errors)
        self.in_request = in_request
        self._queues = {}
        self._tasks = set()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="model")

    def waiting_instances(self):
        """The instances queued and not yet taken into a call, in all queues."""
        return sum(queue.waiting for queue in self._queues.values())

    async def submit(self, key, instances):
        capacity = self.options.max_enqueued_instances - self.waiting_instances()
        if len(instances) > capacity:
            raise QueueFullError(
                f"The batch scheduling queue to which this task was submitted is full; task "
                f"size is {len(instances)} but scheduling capacity is only {capacity}.")
        loop = asyncio.get_running_loop()
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue()
            task = loop.create_task(self._serve_queue(key, queue))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        request = _Request(list(instances), loop.create_future(), loop.time())
        queue.requests.append(request)
        queue.waiting += len(instances)
        queue.arrived.set()
        return await request.future

    def close(self):
        """Waits for the running call, if any, and stops the worker thread."""
        self._executor.shutdown(wait=True)

    async def _serve_queue(self, key, queue):
        """Runs batches for `key` while it has requests; the queue is dropped when empty and a
        new one started by the next request."""
        while queue.requests:
            await self._wait_for_batch(queue)
            pieces = self._take_batch(queue)
            if pieces:
                await self._run(key, pieces)
        del self._queues[key]

    async def _wait_for_batch(self, queue):
        """Returns once a full batch is waiting or the oldest request's timeout has passed."""
        loop = asyncio.get_running_loop()
        deadline = queue.requests[0].enqueued_at + self.options.batch_timeout_s
        while queue.waiting < self.options.max_batch_size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            queue.arrived.clear()
            try:
                await asyncio.wait_for(queue.arrived.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _take_batch(self, queue):
        """Up to max_batch_size of the oldest waiting instances, as (request, start, stop)
        slices; skips what is left of requests already failed or given up."""
        pieces, room = [], self.options.max_batch_size
        while queue.requests and room:
            request = queue.requests[0]
            if request.future.done():
                queue.requests.popleft()
                queue.waiting -= len(request.instances) - request.taken
                continue
            start = request.taken
            stop = min(len(request.instances), start + room)
            pieces.append((request, start, stop))
            request.taken = stop
            queue.waiting -= stop - start
            room -= stop - start
            if stop == len(request.instances):
                queue.requests.popleft()
        return pieces

    async def _run(self, key, pieces):
        instances = [instance for request, start, stop in pieces
                     for instance in request.instances[start:stop]]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._executor, self.run_batch, key, instances)
        except self.request_errors as error:
            if len(pieces) == 1:
                request, start, _ = pieces[0]
                request.fail(self.in_request(error, start))
                return
            for piece in pieces:  # one by one, so only the request at fault fails
                await self._run(key, [piece])
            return
        except Exception as error:
            for request, _, _ in pieces:
                request.fail(error)
            return
        offset = 0
        for request, start, stop in pieces:
            request.results[start:stop] = results[offset:offset + stop - start]
            offset += stop - start
            request.answered += stop - start
            if request.answered == len(request.instances) and not request.future.done():
                request.future.set_result(request.results)


class UnbatchedRunner:
    """Each request one call of its own, as without --enable_batching: `run_batch` runs in a
    thread of asyncio's default pool, so calls of concurrent requests overlap."""

    def __init__(self, run_batch):
        self.run_batch = run_batch

    async def submit(self, key, instances):
        return await asyncio.to_thread(self.run_batch, key, list(instances))

    def close(self):
        """Nothing to stop: the default pool belongs to the event loop."""
