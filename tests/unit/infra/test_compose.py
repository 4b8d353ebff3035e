"""docker-compose.yml against the code: settings, volumes, pinned images, health and restarts.

No engine is needed: the file is read with PyYAML and interpolated here as Compose does; each
service's environment is loaded into the settings classes its command loads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from gateway.config import GatewaySettings
from infra.config import InfraSettings
from infra.settings import ForgeSettings, load_settings
from schemas.topics import MAX_MESSAGE_BYTES
from streams.config import StreamsSettings
from trainer.base_model import default_base_model
from trainer.config import TrainerSettings
from trainer.outputs import resolve_outputs

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "docker-compose.yml"
ADMIN_KEY = "k" * 32
SETTINGS: dict[str, tuple[type[ForgeSettings], ...]] = {
    "infra": (InfraSettings,),
    "gateway": (InfraSettings, GatewaySettings),
    "streams": (InfraSettings, StreamsSettings),
    "trainer": (InfraSettings, TrainerSettings),
}
"""The settings classes each `forge-rl` command loads, by its first argument."""
CLI_VARIABLES = {"FORGE_CONFIG"}
VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


class MissingVariableError(Exception):
    pass


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}, $$."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name", "op", "arg")
        set_ = name in env and (env[name] != "" or not (op or "").startswith(":"))
        if op is None or set_:
            return env.get(name, "")
        if op.endswith("?"):
            raise MissingVariableError(f"{name}: {arg}")
        return arg

    return VARIABLE.sub(substitute, value)


def raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def services(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = {"FORGE_GATEWAY_ADMIN_KEY": ADMIN_KEY} if env is None else env
    loaded: dict[str, Any] = interpolate(raw(), env)["services"]
    return loaded


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def ours(name: str) -> bool:
    """Built from this repository: the `forge-rl` entrypoint runs its command."""
    return "build" in services()[name]


def load(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[type[ForgeSettings], Any]:
    """Every settings class of the service, from its compose environment alone."""
    service = services()[name]
    for key in list(os.environ):
        if key.upper().startswith("FORGE_"):
            monkeypatch.delenv(key)
    for key, value in environment(service).items():
        monkeypatch.setenv(key, value)
    return {cls: load_settings(cls) for cls in SETTINGS[service["command"][0]]}


def mounts(service: Mapping[str, Any]) -> list[tuple[str, PurePosixPath, bool]]:
    """(source, target, read_only) of each volume, short or long syntax."""
    found = []
    for spec in service.get("volumes", []):
        if isinstance(spec, str):
            source, target, *mode = spec.split(":")
            found.append((source, PurePosixPath(target), "ro" in mode))
        else:
            target = PurePosixPath(spec["target"])
            found.append((spec["source"], target, bool(spec.get("read_only"))))
    return found


def location(service: Mapping[str, Any], path: PurePosixPath) -> tuple[str, PurePosixPath, bool]:
    """(volume, path inside it, read_only) of an absolute container path; fails when the
    container keeps the path in its own, unshared, filesystem."""
    held = [(s, t, ro) for s, t, ro in mounts(service) if path.is_relative_to(t)]
    assert held, f"{path} is in no volume"
    source, target, read_only = max(held, key=lambda m: len(m[1].parts))
    return source, path.relative_to(target), read_only


def option(command: list[str], flag: str, default: str | None = None) -> str | None:
    return command[command.index(flag) + 1] if flag in command else default


def pinned_vllm() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pin,) = [r for r in project["optional-dependencies"]["gpu"] if r.startswith("vllm==")]
    return pin.removeprefix("vllm==")


@pytest.mark.parametrize("name", ["init", "gateway", "streams", "trainer"])
def test_every_forge_variable_is_a_setting_and_the_settings_load(name, monkeypatch):
    service = services()[name]
    classes = SETTINGS[service["command"][0]]
    known = CLI_VARIABLES | {
        f"{cls.model_config.get('env_prefix', '')}{field}".upper()
        for cls in classes
        for field in cls.model_fields
    }
    unknown = {k for k in environment(service) if k.upper().startswith("FORGE_")} - known
    assert not unknown, f"{name}: no setting reads {sorted(unknown)}"
    loaded = load(name, monkeypatch)  # every required setting present, every value valid
    assert str(loaded[InfraSettings].home) == "/var/lib/forge"


def test_every_service_of_ours_is_built_here_with_a_forge_command():
    for name, service in services().items():
        if "build" in service:
            assert service["command"][0] in SETTINGS, name


def test_only_the_trainer_image_has_deepspeed():
    """Images by role (the Dockerfile's targets): the trainer's adds DeepSpeed, the rest are
    forge-rl alone, which installs neither DeepSpeed nor matplotlib."""
    targets = {n: s["build"]["target"] for n, s in services().items() if "build" in s}
    assert targets.pop("trainer") == "trainer"
    assert set(targets.values()) == {"service"}
    stages = re.split(r"^FROM ", (ROOT / "Dockerfile").read_text(), flags=re.M)[1:]
    by_target = {stage.split("\n", 1)[0].split(" AS ")[1].strip(): stage for stage in stages}
    assert "deepspeed" not in by_target["service"] and "matplotlib" not in by_target["service"]
    assert "deepspeed" in by_target["trainer"]
    assert by_target["trainer"].startswith("service AS trainer")


def test_the_admin_key_is_required():
    value = raw()["services"]["gateway"]["environment"]["FORGE_GATEWAY_ADMIN_KEY"]
    assert re.fullmatch(r"\$\{FORGE_GATEWAY_ADMIN_KEY:\?.+\}", value)
    with pytest.raises(MissingVariableError, match="FORGE_GATEWAY_ADMIN_KEY"):
        services({})


def test_gateway_and_vllm_load_the_policies_where_the_trainer_writes_them(monkeypatch):
    trainer = load("trainer", monkeypatch)
    home = trainer[InfraSettings].home
    policies = PurePosixPath(resolve_outputs(trainer[TrainerSettings], home).policies)
    all_ = services()
    volume, inside, read_only = location(all_["trainer"], policies)
    assert not read_only
    for reader in ("gateway", "vllm", "vllm-2"):  # PolicyUpdated names the trainer's path
        assert location(all_[reader], policies)[:2] == (volume, inside), reader


def test_vllm_and_the_gateway_serve_the_trainers_base_model(monkeypatch):
    trainer = load("trainer", monkeypatch)
    base = trainer[TrainerSettings].base_model or default_base_model(trainer[InfraSettings].home)
    gateway = load("gateway", monkeypatch)[GatewaySettings]
    fleet = [services()[name] for name in ("vllm", "vllm-2")]
    assert fleet[0] == fleet[1]  # two of the same server, the gateway in front of both
    vllm = fleet[0]
    assert vllm["entrypoint"] == ["vllm", "serve"]
    command = [str(c) for c in vllm["command"]]
    model = option(command, "--model", command[0])
    assert str(gateway.model_dir) == str(base) == model
    all_ = services()
    where = location(all_["trainer"], PurePosixPath(str(base)))[:2]
    assert location(all_["vllm"], PurePosixPath(model))[:2] == where
    assert option(command, "--served-model-name") == gateway.served_model_name
    port = option(command, "--port", "8000")
    assert gateway.vllm_urls == [f"http://vllm:{port}", f"http://vllm-2:{port}"]
    assert vllm["environment"]["VLLM_SERVER_DEV_MODE"] == "1"  # the gateway's weight reload
    assert vllm["profiles"] == ["gpu"]


def test_images_are_the_pinned_versions():
    all_ = services()
    kafka_version = InfraSettings.model_fields["kafka_version"].default
    assert all_["kafka"]["image"] == f"apache/kafka:{kafka_version}"
    assert all_["vllm"]["image"] == f"vllm/vllm-openai:v{pinned_vllm()}"
    limit = int(all_["kafka"]["environment"]["KAFKA_MESSAGE_MAX_BYTES"])
    assert limit >= MAX_MESSAGE_BYTES
    for name, service in all_.items():
        image = service.get("image", "")
        assert "build" in service or re.search(r":[\w.-]*\d", image), f"{name}: unpinned {image}"


def test_every_service_restarts_and_reports_its_health():
    all_ = services()
    waited_for = {
        (target, condition["condition"])
        for service in all_.values()
        for target, condition in (service.get("depends_on") or {}).items()
    }
    for name, service in all_.items():
        assert service.get("restart") in ("always", "unless-stopped", "on-failure"), name
        check = service.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        if check.get("disable"):  # a one-shot: dependents wait for its exit code
            assert service["restart"] == "on-failure", name
            assert (name, "service_healthy") not in waited_for, name
        else:
            assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1, name


def test_healthchecks_and_scrape_targets_use_the_configured_ports(monkeypatch):
    all_ = services()
    gateway = load("gateway", monkeypatch)[GatewaySettings]
    streams_infra, streams = load("streams", monkeypatch).values()
    trainer_infra = load("trainer", monkeypatch)[InfraSettings]
    assert f":{gateway.port}/health" in " ".join(all_["gateway"]["healthcheck"]["test"])
    assert f":{streams.web_port}/" in " ".join(all_["streams"]["healthcheck"]["test"])
    assert f":{trainer_infra.metrics_port}/metrics" in " ".join(
        all_["trainer"]["healthcheck"]["test"]
    )
    scrape = yaml.safe_load((ROOT / "infra/prometheus/prometheus.yml").read_text())
    targets = {
        job["job_name"]: job["static_configs"][0]["targets"][0] for job in scrape["scrape_configs"]
    }
    assert targets == {
        "gateway": f"gateway:{gateway.port}",
        "streams": f"streams:{streams_infra.metrics_port}",
        "trainer": f"trainer:{trainer_infra.metrics_port}",
    }
    for infra in (streams_infra, trainer_infra):  # reachable from Prometheus's container
        assert infra.metrics_bind == "0.0.0.0"
    assert gateway.host == "0.0.0.0"


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_compose_validates_the_file_and_refuses_a_missing_admin_key():
    def config(**env: str) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if k != "FORGE_GATEWAY_ADMIN_KEY"}
        return subprocess.run(
            ["docker-compose", "-f", str(COMPOSE), "config", "-q"],
            capture_output=True, text=True, check=False, cwd=ROOT, env={**clean, **env},
        )  # fmt: skip

    valid = config(FORGE_GATEWAY_ADMIN_KEY=ADMIN_KEY)
    assert valid.returncode == 0, valid.stderr
    missing = config()
    assert missing.returncode != 0 and "FORGE_GATEWAY_ADMIN_KEY" in missing.stderr
