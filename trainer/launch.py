"""How the trainer is started with N data-parallel ranks on this machine: a pure function.

One rank is the CLI itself. More run it under PyTorch's launcher (torchrun, through
``trainer.rank_launcher``, which makes SIGTERM a clean stop) with a standalone rendezvous on a
free local port: it starts one process per rank with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT set, which DeepSpeed reads, and, when any rank dies, stops the others and exits
non-zero — so a supervisor sees one child that ended. Several machines use the launcher directly
(``python -m trainer.rank_launcher --nnodes … -m forge_rl.cli trainer``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def trainer_command(cli: Sequence[str], ranks: int) -> list[str]:
    """``cli`` is ``[python, "-m", "forge_rl.cli", *global options]``; the trainer's argv."""
    if ranks < 1:
        raise ValueError(f"the trainer needs at least one rank, not {ranks}")
    if ranks == 1:
        return [*cli, "trainer"]
    python, *module = cli
    launcher = [python, "-m", "trainer.rank_launcher", "--standalone", f"--nproc-per-node={ranks}"]
    return [*launcher, *module, "trainer"]


def launched_rank() -> int:
    """This process's rank under a launcher; 0 without one."""
    return int(os.environ.get("RANK", "0"))
