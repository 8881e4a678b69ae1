"""Event files as TensorBoard reads them back."""

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2, summary_pb2

from t2t_repro.training import summaries


def test_event_files_one_process_opens_in_one_second_are_read_in_the_order_opened(
        tmp_path, monkeypatch):
    """TensorBoard reads a folder's event files in the order of their names. Twelve files
    opened within one second (the clock held still) carry steps 1 to 12, one each: the reader
    must see them in that order, also across the ninth and tenth file of the process."""
    monkeypatch.setattr(summaries.time, "time", lambda: 1_795_000_000.25)
    monkeypatch.setattr(summaries.EventWriter, "_files_opened", 0)
    for step in range(1, 13):
        writer = summaries.EventWriter(str(tmp_path))
        writer.write(event_pb2.Event(wall_time=1_795_000_000.25, step=step, summary=(
            summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="x",
                                                                 simple_value=step)]))))
        writer.close()
    accumulator = event_accumulator.EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert [event.step for event in accumulator.Scalars("x")] == list(range(1, 13))
