"""The one error hierarchy every service raises and translates at its edge."""

from __future__ import annotations


class ForgeError(Exception):
    """Base of all forge-rl errors; the message is meant for the user, on one line."""


class ConfigError(ForgeError):
    """A setting, env value or config file is malformed."""


class SchemaError(ForgeError):
    """Bytes that are not a record of a known schema version."""

    def __init__(self, message: str, *, schema_name: str | None = None) -> None:
        super().__init__(message)
        self.schema_name = schema_name


class BrokerUnavailableError(ForgeError):
    """Kafka did not answer within the bounded wait."""

    def __init__(self, bootstrap: str, detail: str) -> None:
        super().__init__(f"Kafka at {bootstrap} is unreachable: {detail}")
        self.bootstrap = bootstrap


class InfraError(ForgeError):
    """Local infrastructure could not be set up (missing Java/Maven, broker failed to start)."""
