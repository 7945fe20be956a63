"""Project configuration (``agent-saga.toml`` or ``[tool.agent-saga]`` in ``pyproject.toml``), and
where the agent-saga home is when nothing else is said.

Looked up in the working directory, then its parents (the first file that has a section wins).
Keys:

* ``home``: the agent-saga home (relative paths are relative to the file);
* ``store``: ``"file"`` (default) or a ``postgresql://`` URL;
* ``imports``: modules to import before recovering, so their compensators and probes register;
* ``approvers``: who may approve when a rule names nobody (see ``docs/approvals.md``);
* ``admin_keys``: the administrator public keys trusted to sign redactions and approver keys
  (see :mod:`agent_saga._log.admins`); keep this file where the agents cannot change it.

Environment variables win over the file: ``AGENT_SAGA_HOME``, ``AGENT_SAGA_STORE``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import ConfigurationError

CONFIG_FILE = "agent-saga.toml"
HOME_ENV = "AGENT_SAGA_HOME"
DEFAULT_HOME = ".agent-saga"
KNOWN_KEYS = frozenset({"home", "store", "imports", "approvers", "admin_keys"})


@dataclass(frozen=True)
class Config:
    """Settings read from the project's configuration file (all optional)."""

    home: Path | None = None
    store: str | None = None
    imports: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    source: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def find_config(start: Path | None = None) -> Config:
    """The configuration for ``start`` (default: the working directory).

    Raises:
        ConfigurationError: the file is not valid TOML, or a key has the wrong type.
    """
    directory = (start or Path.cwd()).resolve()
    for candidate in (directory, *directory.parents):
        own = candidate / CONFIG_FILE
        if own.is_file():
            return _parse(own, _load(own))
        project = candidate / "pyproject.toml"
        if project.is_file():
            section = _load(project).get("tool", {}).get("agent-saga")
            if isinstance(section, dict):
                return _parse(project, section)
    return Config()


def _load(path: Path) -> dict[str, Any]:
    import tomllib  # deferred: only a lookup that finds a file parses TOML

    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"{path}: cannot read configuration: {exc}") from exc


def _parse(path: Path, section: dict[str, Any]) -> Config:
    unknown = sorted(set(section) - KNOWN_KEYS)
    if unknown:
        raise ConfigurationError(f"{path}: unknown agent-saga setting(s): {', '.join(unknown)}")
    home = section.get("home")
    store = section.get("store")
    imports = section.get("imports", [])
    if home is not None and not isinstance(home, str):
        raise ConfigurationError(f"{path}: 'home' must be a string")
    if store is not None and not isinstance(store, str):
        raise ConfigurationError(f"{path}: 'store' must be a string")
    if not isinstance(imports, list) or not all(isinstance(m, str) for m in imports):
        raise ConfigurationError(f"{path}: 'imports' must be a list of module names")
    admin_keys = section.get("admin_keys", [])
    if not isinstance(admin_keys, list) or not all(isinstance(k, str) for k in admin_keys):
        raise ConfigurationError(f"{path}: 'admin_keys' must be a list of public keys or files")
    return Config(
        home=(path.parent / home) if home else None,
        store=store,
        imports=tuple(imports),
        admin_keys=tuple(admin_keys),
        source=path,
        extra={k: v for k, v in section.items() if k == "approvers"},
    )


def store_setting(config: Config) -> str | None:
    """The store to use: ``$AGENT_SAGA_STORE``, else the configuration's ``store``."""
    return os.environ.get("AGENT_SAGA_STORE") or config.store


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The agent-saga home.

    In order: ``home`` if given; ``$AGENT_SAGA_HOME``; ``home`` in the project's configuration
    (``agent-saga.toml`` or ``[tool.agent-saga]`` in ``pyproject.toml``); ``./.agent-saga``.
    Only a call without ``home`` or the environment variable reads files.
    """
    if home is not None:
        return Path(home)
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env)
    configured = find_config().home
    return configured if configured is not None else Path.cwd() / DEFAULT_HOME
