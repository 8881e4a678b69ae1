"""REST serving throughput and latency under concurrent clients, with server-side batching and
without.

    python -m t2t_repro.bench serve --export_dir=RUN/export [--model_name=default]
        [--clients=16] [--seconds=30] [--warmup_seconds=2] [--sentences_file=F]
        [--batching=both|on|off] [--max_batch_size=32] [--batch_timeout_micros=N]

In one run, on this machine, for each batching setting in turn (`both`: on, then off):
  1. `python -m t2t_repro.serve --host=127.0.0.1 --port=0 --enable_batching=...` is started
     and its ready line awaited;
  2. --clients threads, each with its own keep-alive connection to 127.0.0.1, send one sentence
     per request as fast as answers come back, cycling through the non-empty lines of
     --sentences_file (default: Multi30k's test_2016_flickr.en) from their own offsets;
  3. after --warmup_seconds, answers are counted for --seconds; then the server is stopped.
Figures: requests/s (answers of any kind), sentences/s (translations), latency percentiles of
the translations, errors over the whole run, and the server's resident memory (VmRSS) before
and after the load. The server is stopped on every way out, Ctrl-C included.
"""

import http.client
import itertools
import math
import os
import sys
import threading
import time

from t2t_repro.bench.arguments import (non_negative_float, non_negative_int,
                                       positive_float, positive_int)
from t2t_repro.bench.pipeline import DEFAULT_DATA_ROOT
from t2t_repro.bench.report import format_table
from t2t_repro.cli.one_line_parser import OneLineErrorParser
from t2t_repro.errors import ConfigurationError
from t2t_repro.serving.client import QueryError, parse_predictions, predict_path, request_body
from t2t_repro.serving.local_server import HOST, LocalServer
from t2t_repro.utils.text_lines import read_lines

REQUEST_TIMEOUT_S = 60


def client_loop(port, model_name, sentences, offset, stop, records):
    """Sends one sentence per request over one keep-alive connection until `stop` is set;
    appends (started, finished, error text or None) for each answer to `records`."""
    path, connection = predict_path(model_name), None
    headers = {"Content-Type": "application/json"}
    for index in itertools.count(offset):
        if stop.is_set():
            break
        body = request_body([sentences[index % len(sentences)]])
        started, error = time.perf_counter(), None
        try:
            connection = connection or http.client.HTTPConnection(HOST, port,
                                                                  timeout=REQUEST_TIMEOUT_S)
            connection.request("POST", path, body, headers)
            reply = connection.getresponse()
            parse_predictions(reply.status, reply.read(), 1)
        except QueryError as rejected:
            error = str(rejected)
        except (OSError, http.client.HTTPException) as failed:
            error = f"{type(failed).__name__}: {failed}"
            if connection:
                connection.close()
            connection = None
        records.append((started, time.perf_counter(), error))
    if connection:
        connection.close()


def run_load(server, model_name, sentences, clients, warmup_seconds, seconds):
    """The figures of `clients` concurrent clients against `server` (see the module)."""
    stop, records = threading.Event(), [[] for _ in range(clients)]
    threads = [threading.Thread(target=client_loop, daemon=True,
                                args=(server.port, model_name, sentences,
                                      client * len(sentences) // clients, stop, records[client]))
               for client in range(clients)]
    memory_before = server.resident_mib()
    window_start = time.perf_counter() + warmup_seconds
    window_end = window_start + seconds
    try:
        for thread in threads:
            thread.start()
        while time.perf_counter() < window_end:
            server.check_running()
            time.sleep(min(0.2, max(0.0, window_end - time.perf_counter())))
    finally:
        stop.set()
        deadline = time.perf_counter() + REQUEST_TIMEOUT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.perf_counter()))
    everything = [record for client_records in records for record in client_records]
    counted = [(finished - started, error) for started, finished, error in everything
               if window_start <= finished <= window_end]
    latencies = sorted(latency * 1000 for latency, error in counted if error is None)
    errors = [error for _, error in sorted((started, error) for started, _, error in everything
                                           if error is not None)]
    return {
        "requests/s (answers of any kind)": len(counted) / seconds,
        "sentences/s (translations)": len(latencies) / seconds,
        "latency p50": percentile(latencies, 50),
        "latency p90": percentile(latencies, 90),
        "latency p99": percentile(latencies, 99),
        "errors (whole run, warm-up included)": len(errors),
        "server VmRSS before the load": memory_before,
        "server VmRSS after the load": server.resident_mib(),
        "server peak resident memory (VmHWM)": server.resident_mib("VmHWM"),
        "first error": errors[0] if errors else None,
    }


UNITS = {"requests/s (answers of any kind)": "req/s", "sentences/s (translations)": "sent/s",
         "latency p50": "ms", "latency p90": "ms", "latency p99": "ms",
         "errors (whole run, warm-up included)": "requests",
         "server VmRSS before the load": "MiB", "server VmRSS after the load": "MiB",
         "server peak resident memory (VmHWM)": "MiB"}


def percentile(ordered, p):
    """The nearest-rank `p`th percentile of the sorted list `ordered` (NaN when empty)."""
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else math.nan


def measure(args, batching, sentences):
    """Starts the server with batching on or off, loads it, stops it; its figures and version."""
    flags = [f"--export_dir={args.export_dir}", f"--model_name={args.model_name}",
             f"--enable_batching={'true' if batching else 'false'}",
             f"--max_batch_size={args.max_batch_size}"]
    if args.batch_timeout_micros is not None:
        flags.append(f"--batch_timeout_micros={args.batch_timeout_micros}")
    with LocalServer(flags) as server:
        figures = run_load(server, args.model_name, sentences, args.clients,
                           args.warmup_seconds, args.seconds)
    return figures, server.version


def table_rows(first, second, second_name):
    """One row per figure: `first`'s, beside `second`'s (None: no peer)."""
    rows = []
    for what, unit in UNITS.items():
        if first[what] is None or (second and second[what] is None):
            continue  # no memory figure on this system
        rows.append((what, first[what], unit, second_name if second else "",
                     second[what] if second else None))
    return rows


def main(argv):
    parser = OneLineErrorParser(prog="python -m t2t_repro.bench serve",
                                description=__doc__.split("\n\n")[0])
    parser.add_argument("--export_dir", required=True,
                        help="the exporter's folder of versions (RUN/export)")
    parser.add_argument("--model_name", default="default")
    parser.add_argument("--clients", type=positive_int, default=16,
                        help="concurrent clients (threads)")
    parser.add_argument("--seconds", type=positive_float, default=30, help="the measured time")
    parser.add_argument("--warmup_seconds", type=non_negative_float, default=2,
                        help="load before the measured time, not counted")
    parser.add_argument("--sentences_file",
                        default=os.path.normpath(os.path.join(
                            DEFAULT_DATA_ROOT, "multi30k_ende", "test_2016_flickr.en")),
                        help="the sentences sent, one per line")
    parser.add_argument("--batching", choices=("both", "on", "off"), default="both",
                        help="the server's --enable_batching: both runs it twice, on then off")
    parser.add_argument("--max_batch_size", type=positive_int, default=32)
    parser.add_argument("--batch_timeout_micros", type=non_negative_int,
                        help="passed to the server when given (default: the server's)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.export_dir):
        raise ConfigurationError(f"--export_dir={args.export_dir} is not a folder; export a run "
                                 f"first (python -m t2t_repro.exporter --output_dir=RUN).")
    sentences = [line for line in read_lines(args.sentences_file, "--sentences_file")
                 if line.strip()]
    if not sentences:
        raise ConfigurationError(f"--sentences_file {args.sentences_file} has no non-empty line.")

    settings = {"both": (True, False), "on": (True,), "off": (False,)}[args.batching]
    results = [measure(args, batching, sentences) for batching in settings]
    figures = [result[0] for result in results]
    names = [f"batching {'on' if batching else 'off'}" for batching in settings]
    title = (f"REST serving of {args.export_dir} (model {args.model_name}, version "
             f"{results[0][1]}): {args.clients} clients, one sentence per request, "
             f"{args.seconds:g} s measured after {args.warmup_seconds:g} s warm-up; "
             f"{len(sentences)} sentences from {args.sentences_file}; "
             f"max_batch_size={args.max_batch_size}"
             + (f", batch_timeout_micros={args.batch_timeout_micros}"
                if args.batch_timeout_micros is not None else "")
             + f"; figure: {names[0]}" + (f", peer: {names[1]}" if len(names) > 1 else ""))
    print(format_table(table_rows(figures[0], figures[1] if len(figures) > 1 else None,
                                  names[-1]), title))
    for name, result in zip(names, figures):
        if result["first error"]:
            print(f"first error ({name}): {result['first error']}")


if __name__ == "__main__":
    main(sys.argv[1:])
