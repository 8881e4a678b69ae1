"""`python -m t2t_repro.trainer`, stopped (SIGSTOP) at a point the caller names, so that a test
can SIGKILL it there however fast the machine is.

    python stopping_trainer.py <trainer flags>

T2T_TEST_STOP_AFTER_STEP=n stops the process once step n's update (and its checkpoint, if
due) is done; `n,m,...` stops it at each of those steps, for a test that continues it with
SIGCONT. T2T_TEST_STOP_IN_CHECKPOINT_WRITE=1 stops it inside the first checkpoint write, with
the temporary checkpoint file still open and unflushed. The test waits for the stop
(`waitpid` with WUNTRACED) instead of timing its kill.
"""

import os
import signal
import sys

from t2t_repro import trainer  # first: it quiets TensorFlow before anything imports it

import h5py  # noqa: E402

from t2t_repro.cli import entry_point  # noqa: E402
from t2t_repro.training import checkpoints  # noqa: E402


def stop_this_process():
    os.kill(os.getpid(), signal.SIGSTOP)


def stop_after_steps(steps_to_stop_at):
    after_update = checkpoints.CheckpointSchedule.after_update

    def after_update_then_stop(self, step):
        after_update(self, step)
        if step in steps_to_stop_at:
            stop_this_process()

    checkpoints.CheckpointSchedule.after_update = after_update_then_stop


def stop_inside_checkpoint_write():
    close = h5py.File.close

    def stop_then_close(self):
        if self.id.valid and checkpoints.is_partial_checkpoint(self.filename):
            stop_this_process()
        close(self)

    h5py.File.close = stop_then_close


if __name__ == "__main__":
    # Ctrl-C raises KeyboardInterrupt, as in a terminal, also where the tests run as a
    # background job, whose processes start with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if "T2T_TEST_STOP_AFTER_STEP" in os.environ:
        stop_after_steps({int(step) for step in os.environ["T2T_TEST_STOP_AFTER_STEP"].split(",")})
    if os.environ.get("T2T_TEST_STOP_IN_CHECKPOINT_WRITE") == "1":
        stop_inside_checkpoint_write()
    sys.argv[0] = trainer.__file__
    entry_point.run(trainer.main)  # as `python -m t2t_repro.trainer` starts
