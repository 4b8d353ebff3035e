"""The machine a measurement ran on, as one line every bench prints before it starts: figures
from two machines are only comparable when this line says how they differ (CPU model, cores,
load at the start, the versions that set the speed)."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

from infra.config import InfraSettings


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def machine_line() -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    kafka = InfraSettings().kafka_version  # the environment's override, as the broker reads it
    return (
        f"machine: {cpu_model()}, {os.cpu_count()} cores ({usable} usable), load {load}, "
        f"Python {platform.python_version()}, torch {package_version('torch')}, "
        f"Kafka {kafka} (aiokafka {package_version('aiokafka')}, "
        f"faust {package_version('faust-streaming')})"
    )
