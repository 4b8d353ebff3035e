"""A black-box agent CLI playing the echo task: Claude Code, Codex, OpenCode or mini-swe-agent,
pointed at the rollout's base URL, headless, its HOME and config in a temporary directory,
telemetry and updates off. Independent of forge-rl: it reads what `forge-rl run` gives every
agent (OPENAI_BASE_URL, OPENAI_API_KEY, FORGE_TASK) and prints the echo task's answer line.

    forge-rl --config examples/quickstart.yaml run \
        --agent-for echo "python examples/agents/cli_agent.py claude"

The CLI binaries are found on PATH, else where `scripts/setup_agents.sh` installed them (its
printed directory, or FORGE_AGENTS_ENV). No output limit is set: a turn cut by max tokens is an
error to some CLIs (Codex exits 1 on an incomplete response), so each runs until the policy ends
its turn (the gateway lowers an output limit to what the context leaves).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TIMEOUT_S = 240
QUIET = {
    "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
    "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1", "MSWEA_CONFIGURED": "true",
    "MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MSWEA_SILENT_STARTUP": "1",
}  # fmt: skip
"""No telemetry, update checks, model catalogues or price lists: the CLIs reach only the
gateway (each of these was seen to reach the internet without it)."""


def binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    kind = "python/bin" if name == "mini" else "npm/node_modules/.bin"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "forge-rl"
    given = os.environ.get("FORGE_AGENTS_ENV")
    places = [Path(given)] if given else sorted(cache.glob("agents-*"), reverse=True)
    for env_dir in places:
        if (env_dir / kind / name).exists():
            return str(env_dir / kind / name)
    raise SystemExit(f"no {name} on PATH or in {given or cache}: run scripts/setup_agents.sh")


def claude(base: str, key: str, prompt: str, home: Path) -> tuple[list[str], dict[str, str]]:
    env = {
        "ANTHROPIC_BASE_URL": base.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": key,
        "ANTHROPIC_MODEL": "forge-policy",
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
    }
    return [binary("claude"), "-p", prompt, "--bare", "--tools", "Bash"], env


def codex(base: str, key: str, prompt: str, home: Path) -> tuple[list[str], dict[str, str]]:
    config = f"""model = "forge-policy"
model_provider = "forge"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"
[model_providers.forge]
name = "forge-rl gateway"
base_url = "{base}"
env_key = "FORGE_ROLLOUT_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
[features]
plugins = false
apps = false
goals = false
[agents]
enabled = false
[analytics]
enabled = false
[feedback]
enabled = false
[otel]
exporter = "none"
"""
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(config)
    env = {"CODEX_HOME": str(home / ".codex"), "FORGE_ROLLOUT_KEY": key}
    return [binary("codex"), "exec", "--skip-git-repo-check", "--ephemeral", prompt], env


def opencode(base: str, key: str, prompt: str, home: Path) -> tuple[list[str], dict[str, str]]:
    config = {
        "model": "forge/forge-policy", "small_model": "forge/forge-policy",
        "autoupdate": False, "share": "disabled",
        "provider": {"forge": {
            "npm": "@ai-sdk/openai-compatible", "name": "forge-rl gateway",
            "options": {"baseURL": base, "apiKey": key},
            "models": {"forge-policy": {"name": "forge policy", "tool_call": True, "limit": {
                "context": 65536, "output": 32000}}},
        }},
    }  # fmt: skip
    plugins = home / ".config" / "opencode"
    (plugins / "node_modules").mkdir(parents=True)
    wanted = {"dependencies": {"@opencode-ai/plugin": "1.18.33"}}
    (plugins / "package.json").write_text(json.dumps(wanted))  # seeded: nothing fetched
    lock = {"lockfileVersion": 3, "packages": {"": wanted}}
    (plugins / "package-lock.json").write_text(json.dumps(lock))
    (home / "opencode.json").write_text(json.dumps(config))
    env = {"OPENCODE_CONFIG": str(home / "opencode.json"), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
           "XDG_STATE_HOME": str(home / ".local/state")}  # fmt: skip
    return [binary("opencode"), "run", *prompt.split()], env


def mini(base: str, key: str, prompt: str, home: Path) -> tuple[list[str], dict[str, str]]:
    command = [binary("mini"), "-m", "openai/forge-policy", "-t", prompt, "-y",
               "--exit-immediately", "-c", "mini.yaml",
               "-c", f"model.model_kwargs.api_base={base}",
               "-c", f"model.model_kwargs.api_key={key}",
               "-c", "agent.step_limit=2", "-o", str(home / "trajectory.json")]  # fmt: skip
    return command, {}


CLIS = {"claude": claude, "codex": codex, "opencode": opencode, "mini": mini}


def main() -> int:
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which not in CLIS:
        print(f"usage: cli_agent.py {{{','.join(CLIS)}}}", file=sys.stderr)
        return 2
    task = json.loads(os.environ["FORGE_TASK"])
    prompt = f"Repeat this digit and nothing else: {task['digit']}"
    with tempfile.TemporaryDirectory(prefix=f"{which}-home-") as tmp:
        home = Path(tmp)
        command, env = CLIS[which](os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"],
                                   prompt, home)  # fmt: skip
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                    "TERM": "dumb", **QUIET, **env}  # fmt: skip
        done = subprocess.run(command, env=base_env, cwd=home, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        print(f"{which} exited {done.returncode}; its output ends:\n{done.stdout[-2000:]}",
              file=sys.stderr)  # fmt: skip
        return done.returncode
    digit = re.search(r"\d", done.stdout)
    print(json.dumps({"answer": int(digit.group()) if digit else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
