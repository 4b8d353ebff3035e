"""Finding Java and the Kafka broker's jars (resolved once with Maven, then reused offline)."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path

from schemas.errors import InfraError

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "kafka"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
MIN_JAVA = 17


def find_java() -> str:
    """Path of a java >= 17, or an error that says what is missing."""
    java = shutil.which("java")
    if java is None:
        raise InfraError(
            f"Java {MIN_JAVA}+ is required to run the local Kafka broker and `java` is not on "
            "PATH; install OpenJDK 17 or point FORGE_KAFKA_BOOTSTRAP at an existing cluster"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise InfraError(
            f"Java {MIN_JAVA}+ is required to run the local Kafka broker; {java} is "
            f"version {major or 'unknown'}"
        )
    return java


def kafka_jars(version: str, cache_dir: Path) -> Path:
    """Directory holding the broker's runtime classpath, resolving it with Maven on first use."""
    target = cache_dir / f"kafka-{version}"
    lib = target / "lib"
    marker = target / ".complete"
    if marker.exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise InfraError(
            f"Kafka {version} jars are not cached in {target} and Maven (`mvn`) is not on PATH "
            "to fetch them from Maven Central; install Maven or set FORGE_KAFKA_BOOTSTRAP"
        )
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(TEMPLATES / "pom.xml", target / "pom.xml")
    if lib.exists():
        shutil.rmtree(lib)
    log.info("resolving Kafka %s jars from Maven Central into %s", version, lib)
    cmd = [
        mvn, "-q", "-B", "-f", str(target / "pom.xml"), DEPENDENCY_PLUGIN,
        f"-Dkafka.version={version}", f"-DoutputDirectory={lib}", "-DincludeScope=runtime",
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not any(lib.glob(f"kafka_2.13-{version}.jar")):
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        raise InfraError(f"Maven could not resolve Kafka {version}: {' | '.join(tail)}")
    marker.touch()
    return lib
