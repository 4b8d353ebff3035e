"""The streams worker's stalled stages, as its ``/health`` names them (``streams.stalls``)."""

from __future__ import annotations

import httpx

from schemas.errors import ForgeError


class PipelineStalledError(ForgeError):
    """The run ended with a stage of the streams worker stalled: rollouts it played were
    never trained on."""


async def stalled_stages(web_url: str, timeout_s: float = 5.0) -> tuple[str, ...]:
    """Each stalled stage, with how long and why; none when the worker does not answer (a
    worker that died is the supervisor's to report)."""
    try:
        async with httpx.AsyncClient(base_url=web_url, timeout=timeout_s) as http:
            reply = await http.get("/health")
        stalled = reply.json()["stalled"] if reply.status_code in (200, 503) else {}
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return ()
    return tuple(f"{stage} {why}" for stage, why in sorted(stalled.items()))
