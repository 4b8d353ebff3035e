"""Child processes whose stderr goes to a file, never to a pipe the test does not read.

A pipe nobody reads fills at 64 KiB and then blocks the child on its next log line, and its
contents were read only when the child had died: a worker that stalled or would not stop left
nothing to look at. In a file the log is there either way, under the test's tmp_path. (The
streams workers log little — 75 bytes to 14 KiB a test, measured — so no stall seen so far
was this.)
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path


class LoggedProcess(subprocess.Popen[bytes]):
    def __init__(
        self,
        cmd: Sequence[str],
        env: Mapping[str, str],
        log_dir: Path,
        *,
        start_new_session: bool = False,
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=log_dir, prefix="process-", suffix=".log")
        self.log_path = Path(name)
        self.env = dict(env)
        """What it was started with: a failing test reads its ports back from it."""
        with open(handle, "wb") as log:
            super().__init__(
                cmd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=start_new_session,
            )

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]
