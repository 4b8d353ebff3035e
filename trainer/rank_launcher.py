"""PyTorch's launcher (torchrun) for the trainer's ranks, with SIGTERM a stop and not a failure.

torchrun turns SIGTERM into an exception: it passes the signal to the ranks, waits for them, and
then exits 1 with a traceback even when every rank stopped cleanly, so a run's supervisor (and a
user) reads a stop as a failure. Here SIGTERM is the ranks' business: each rank stops after the
step in flight on a checkpoint all ranks agree on (``trainer.stop_request``), this launcher only
passes the signal on to them, and torchrun sees its workers end with 0 and ends with 0. SIGINT,
SIGHUP and SIGQUIT keep torchrun's own handling. Arguments are torchrun's, unchanged
(``python -m trainer.rank_launcher --nnodes … -m forge_rl.cli trainer`` on several machines).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

import psutil

TORCHRUN_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"
"""The signals torchrun still handles (its default adds SIGTERM); a ``--signals-to-handle``
given on the command line comes later and wins."""


def pass_on_to_ranks(signum: int, frame: FrameType | None) -> None:
    """Send the signal to the ranks (this launcher's children). Before any has started there is
    no step to finish: the launcher ends as the signal's default would have it."""
    ranks = psutil.Process().children()
    if not ranks:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    for rank in ranks:
        with contextlib.suppress(psutil.NoSuchProcess):
            rank.send_signal(signum)


def main(argv: Sequence[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, pass_on_to_ranks)
    from torch.distributed.run import main as torchrun

    given = list(sys.argv[1:] if argv is None else argv)
    torchrun([f"--signals-to-handle={TORCHRUN_SIGNALS}", *given])


if __name__ == "__main__":
    main()
