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


def test_a_resumed_runs_points_replace_those_a_killed_run_wrote_after_its_checkpoint(tmp_path):
    """The killed run logged steps 5 to 40 and checkpointed at 25; the resumed run writes 30
    and 35 again: TensorBoard shows each step once, the resumed run's after step 25."""
    killed = summaries.ScalarWriter(str(tmp_path))
    for step in range(5, 45, 5):
        killed.write({"loss": 1.0}, step)
    resumed = summaries.ScalarWriter(str(tmp_path), resumed_step=25)
    for step in (30, 35):
        resumed.write({"loss": 2.0}, step)
    accumulator = event_accumulator.EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert [(event.step, event.value) for event in accumulator.Scalars("loss")] == [
        (5, 1.0), (10, 1.0), (15, 1.0), (20, 1.0), (25, 1.0), (30, 2.0), (35, 2.0)]
