"""RequestBatcher and UnbatchedRunner with a plain function as the model: which instances go
into which call (merging, keys, the timeout, splitting), results back in order, the queue
bound, error isolation, and calls run one at a time off the event loop."""

import asyncio
import threading
import time

import pytest

from t2t_repro.serving.request_batching import (BatchingOptions, QueueFullError, RequestBatcher,
                                                UnbatchedRunner)


class BadInput(ValueError):
    pass


class RecordingModel:
    """Upper-cases each instance, recording every call's key, instances and thread; "bad" in
    a call raises BadInput, "crash" a RuntimeError."""

    def __init__(self):
        self.calls = []
        self.threads = set()
        self.running = 0
        self.most_running = 0
        self.lock = threading.Lock()

    def __call__(self, key, instances):
        with self.lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            self.calls.append((key, list(instances)))
            self.threads.add(threading.get_ident())
            time.sleep(0.01)  # long enough for overlapping calls to show
            if "crash" in instances:
                raise RuntimeError("the model crashed")
            if "bad" in instances:
                raise BadInput("an input is bad")
            return [f"{key}:{instance.upper()}" for instance in instances]
        finally:
            with self.lock:
                self.running -= 1


def run_with_batcher(coroutine_function, model, **options):
    """Runs `coroutine_function(batcher)` in a fresh event loop; closes the batcher after."""
    batcher = RequestBatcher(model, BatchingOptions(**options), request_errors=(BadInput,))

    async def main():
        return await coroutine_function(batcher)

    try:
        return asyncio.run(main())
    finally:
        batcher.close()


def expected(key, instances):
    return [f"{key}:{instance.upper()}" for instance in instances]


def test_concurrent_requests_are_merged_into_one_call_and_answered_in_order():
    model = RecordingModel()
    requests = [["a", "b"], ["c"], ["d", "e", "f"]]

    async def submit_all(batcher):
        return await asyncio.gather(*(batcher.submit("k", r) for r in requests))

    results = run_with_batcher(submit_all, model, max_batch_size=8, batch_timeout_s=0.05)
    assert results == [expected("k", r) for r in requests]
    assert model.calls == [("k", ["a", "b", "c", "d", "e", "f"])]


def test_requests_of_different_keys_are_never_merged():
    model = RecordingModel()

    async def submit_both(batcher):
        return await asyncio.gather(batcher.submit("x", ["a"]), batcher.submit("y", ["b"]))

    results = run_with_batcher(submit_both, model, max_batch_size=8, batch_timeout_s=0.05)
    assert results == [["x:A"], ["y:B"]]
    assert sorted(model.calls) == [("x", ["a"]), ("y", ["b"])]


def test_a_batch_waits_for_the_timeout_and_takes_what_arrives_meanwhile():
    model = RecordingModel()
    timeout = 0.3

    async def submit_staggered(batcher):
        start = time.monotonic()
        first = asyncio.ensure_future(batcher.submit("k", ["a"]))
        await asyncio.sleep(timeout / 3)
        second = await batcher.submit("k", ["b"])
        return await first, second, time.monotonic() - start

    first, second, elapsed = run_with_batcher(submit_staggered, model, max_batch_size=8,
                                              batch_timeout_s=timeout)
    assert (first, second) == (["k:A"], ["k:B"])
    assert model.calls == [("k", ["a", "b"])]
    # The call ran once the first request had waited the timeout, not at the second's arrival.
    assert timeout <= elapsed < timeout + 1.0


def test_a_full_batch_runs_without_waiting_for_the_timeout():
    model = RecordingModel()

    async def submit_full_batch(batcher):
        start = time.monotonic()
        results = await asyncio.gather(batcher.submit("k", ["a", "b"]),
                                       batcher.submit("k", ["c", "d"]))
        return results, time.monotonic() - start

    results, elapsed = run_with_batcher(submit_full_batch, model, max_batch_size=4,
                                        batch_timeout_s=30.0)
    assert results == [["k:A", "k:B"], ["k:C", "k:D"]]
    assert elapsed < 5.0


def test_requests_larger_than_a_batch_are_split_and_answered_in_order():
    model = RecordingModel()
    large, small = [f"a{i}" for i in range(5)], ["b0", "b1"]

    async def submit_both(batcher):
        return await asyncio.gather(batcher.submit("k", large), batcher.submit("k", small))

    results = run_with_batcher(submit_both, model, max_batch_size=3, batch_timeout_s=0.01)
    assert results == [expected("k", large), expected("k", small)]
    assert [instances for _, instances in model.calls] == [
        ["a0", "a1", "a2"], ["a3", "a4", "b0"], ["b1"]]


def test_a_full_queue_refuses_at_once_and_serves_the_rest_after():
    release, started = threading.Event(), threading.Event()

    def blocking_model(key, instances):
        started.set()
        release.wait(30)
        return [instance.upper() for instance in instances]

    async def overfill(batcher):
        running = asyncio.ensure_future(batcher.submit("k", ["a"]))
        while not started.is_set():  # "a" is in the model: no longer waiting
            await asyncio.sleep(0.005)
        waiting = asyncio.ensure_future(batcher.submit("k", ["b", "c", "d"]))
        await asyncio.sleep(0)  # let it enqueue
        try:
            with pytest.raises(QueueFullError, match="full; task size is 2 but scheduling "
                                                     "capacity is only 1"):
                await batcher.submit("k", ["e", "f"])
        finally:
            release.set()
        return await running, await waiting, await batcher.submit("k", ["e", "f"])

    results = run_with_batcher(overfill, blocking_model, max_batch_size=8, batch_timeout_s=0.0,
                               max_enqueued_instances=4)
    assert results == (["A"], ["B", "C", "D"], ["E", "F"])


def test_a_bad_request_in_a_merged_call_fails_alone():
    model = RecordingModel()
    requests = [["a"], ["b", "bad"], ["c", "d"]]

    async def submit_all(batcher):
        return await asyncio.gather(*(batcher.submit("k", r) for r in requests),
                                    return_exceptions=True)

    good_first, error, good_last = run_with_batcher(submit_all, model, max_batch_size=8,
                                                    batch_timeout_s=0.05)
    assert good_first == ["k:A"] and good_last == ["k:C", "k:D"]
    assert isinstance(error, BadInput)
    # The merged call failed, then each request was run by itself.
    assert [instances for _, instances in model.calls] == [
        ["a", "b", "bad", "c", "d"], ["a"], ["b", "bad"], ["c", "d"]]


def test_the_rest_of_a_failed_split_request_is_not_run():
    model = RecordingModel()

    async def submit(batcher):
        return await asyncio.gather(batcher.submit("k", ["bad", "x", "y", "z"]),
                                    return_exceptions=True)

    [error] = run_with_batcher(submit, model, max_batch_size=2, batch_timeout_s=0.0)
    assert isinstance(error, BadInput)
    assert [instances for _, instances in model.calls] == [["bad", "x"]]


def test_other_errors_fail_every_request_of_the_call_without_retries():
    model = RecordingModel()

    async def submit_all(batcher):
        return await asyncio.gather(batcher.submit("k", ["a"]), batcher.submit("k", ["crash"]),
                                    return_exceptions=True)

    errors = run_with_batcher(submit_all, model, max_batch_size=8, batch_timeout_s=0.05)
    assert all(isinstance(error, RuntimeError) for error in errors)
    assert len(model.calls) == 1


def test_calls_run_one_at_a_time_in_one_thread_off_the_event_loop():
    model = RecordingModel()
    keys = [f"key{i}" for i in range(6)]  # six queues, each wanting its own call at once

    async def submit_all(batcher):
        return await asyncio.gather(*(batcher.submit(key, ["a"]) for key in keys))

    results = run_with_batcher(submit_all, model, max_batch_size=8, batch_timeout_s=0.0)
    assert results == [[f"{key}:A"] for key in keys]
    assert model.most_running == 1
    assert len(model.threads) == 1 and threading.get_ident() not in model.threads


def test_unbatched_runner_makes_one_call_per_request_off_the_event_loop():
    model = RecordingModel()
    requests = [["a", "b"], ["c", "d"], ["e", "f"]]

    async def submit_all():
        runner = UnbatchedRunner(model)
        return await asyncio.gather(*(runner.submit("k", r) for r in requests))

    assert asyncio.run(submit_all()) == [expected("k", r) for r in requests]
    assert sorted(instances for _, instances in model.calls) == requests
    assert threading.get_ident() not in model.threads
