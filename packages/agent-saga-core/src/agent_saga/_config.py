"""Project configuration (``agent-saga.toml`` or ``[tool.agent-saga]`` in ``pyproject.toml``), and
where the agent-saga home is when nothing else is said.

Looked up in the working directory, then its parents (the first file that has a section wins).
Keys:

* ``home``: the agent-saga home (relative paths are relative to the file);
* ``store``: ``"file"`` (default) or a ``postgresql://`` URL;
* ``store_schema``: the PostgreSQL schema that holds the fleet's tables (default ``agent_saga``);
* ``chain_key_file``: a file holding the key of a keyed hash chain (relative to the file);
* ``imports``: modules to import before recovering, so their compensators and probes register;
* ``approvers``: who may approve when a rule names nobody (see ``docs/approvals.md``);
* ``require_passkey``: ``true`` makes every kit count only passkey (WebAuthn) votes, local or
  against ``server`` (what ``AgentKit(require_passkey=True)`` does);
* ``admin_keys``: the administrator public keys trusted to sign redactions and approver keys
  (see :mod:`agent_saga._log.admins`); keep this file where the agents cannot change it;
* ``server``: a control plane's URL (``AgentKit`` then ships its log there and takes its kill
  switch, approvals and budgets from it);
* ``server_token_file``: a file holding the agent token for ``server`` (relative to the file;
  private to its owner, as a chain key file);
* ``segment_bytes``, ``segment_records``: when the file log's open segment is sealed and a new
  one started (defaults 64 MiB and 1,000,000 records).

Environment variables win over the file: ``AGENT_SAGA_HOME``, ``AGENT_SAGA_STORE``,
``AGENT_SAGA_STORE_SCHEMA``, ``AGENT_SAGA_CHAIN_KEY_FILE``, ``AGENT_SAGA_SERVER``,
``AGENT_SAGA_SERVER_TOKEN_FILE``.

A chain key is only ever read from a file (never from a command line or an environment
variable holding the secret itself): the file holds the key as text, for example 64 hex digits
made by ``python -c "import secrets; print(secrets.token_hex(32))"``; surrounding whitespace is
not part of it, and the key is that text's UTF-8 bytes (what ``AgentKit(chain_key=...)`` takes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import ConfigurationError

CONFIG_FILE = "agent-saga.toml"
HOME_ENV = "AGENT_SAGA_HOME"
STORE_ENV = "AGENT_SAGA_STORE"
SCHEMA_ENV = "AGENT_SAGA_STORE_SCHEMA"
CHAIN_KEY_FILE_ENV = "AGENT_SAGA_CHAIN_KEY_FILE"
SERVER_ENV = "AGENT_SAGA_SERVER"
SERVER_TOKEN_FILE_ENV = "AGENT_SAGA_SERVER_TOKEN_FILE"  # noqa: S105 - a variable's name
DEFAULT_HOME = ".agent-saga"
KNOWN_KEYS = frozenset(
    {
        "home", "store", "store_schema", "chain_key_file", "imports", "approvers", "admin_keys",
        "server", "server_token_file", "segment_bytes", "segment_records", "require_passkey",
    }
)  # fmt: skip
MIN_CHAIN_KEY_BYTES = 16
MAX_CHAIN_KEY_BYTES = 4096


@dataclass(frozen=True)
class Config:
    """Settings read from the project's configuration file (all optional)."""

    home: Path | None = None
    store: str | None = None
    imports: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    store_schema: str | None = None
    chain_key_file: Path | None = None
    server: str | None = None
    server_token_file: Path | None = None
    source: Path | None = None
    segments: dict[str, int] = field(default_factory=dict)
    """``segment_bytes`` / ``segment_records``: when the file log's open segment is sealed."""
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
    for name in ("home", "store", "store_schema", "chain_key_file", "server", "server_token_file"):
        if section.get(name) is not None and not isinstance(section[name], str):
            raise ConfigurationError(f"{path}: '{name}' must be a string")
    key_file = section.get("chain_key_file")
    token_file = section.get("server_token_file")
    if not isinstance(imports, list) or not all(isinstance(m, str) for m in imports):
        raise ConfigurationError(f"{path}: 'imports' must be a list of module names")
    admin_keys = section.get("admin_keys", [])
    if not isinstance(admin_keys, list) or not all(isinstance(k, str) for k in admin_keys):
        raise ConfigurationError(f"{path}: 'admin_keys' must be a list of public keys or files")
    if type(section.get("require_passkey", False)) is not bool:
        raise ConfigurationError(f"{path}: 'require_passkey' must be true or false")
    segments: dict[str, int] = {}
    for name in ("segment_bytes", "segment_records"):
        value = section.get(name)
        if value is not None and (type(value) is not int or value < 1):
            raise ConfigurationError(f"{path}: '{name}' must be a positive integer")
        if value is not None:
            segments[name] = value
    return Config(
        home=(path.parent / home) if home else None,
        store=store,
        imports=tuple(imports),
        admin_keys=tuple(admin_keys),
        store_schema=section.get("store_schema") or None,
        chain_key_file=(path.parent / key_file) if key_file else None,
        server=section.get("server") or None,
        server_token_file=(path.parent / token_file) if token_file else None,
        source=path,
        segments=segments,
        extra={k: v for k, v in section.items() if k in ("approvers", "require_passkey")},
    )


def store_setting(config: Config) -> str | None:
    """The store to use: ``$AGENT_SAGA_STORE``, else the configuration's ``store``."""
    return os.environ.get(STORE_ENV) or config.store


def is_postgres_url(store: object) -> bool:
    """True when ``store`` names a PostgreSQL server (fleet mode)."""
    return isinstance(store, str) and store.startswith(("postgresql://", "postgres://"))


def schema_setting(config: Config) -> str | None:
    """The fleet's PostgreSQL schema: ``$AGENT_SAGA_STORE_SCHEMA``, else ``store_schema``."""
    return os.environ.get(SCHEMA_ENV) or config.store_schema


def chain_key_file_setting(config: Config) -> Path | None:
    """The chain key's file: ``$AGENT_SAGA_CHAIN_KEY_FILE``, else ``chain_key_file``."""
    env = os.environ.get(CHAIN_KEY_FILE_ENV)
    return Path(env) if env else config.chain_key_file


def server_setting(config: Config) -> str | None:
    """A control plane's URL: ``$AGENT_SAGA_SERVER``, else the configuration's ``server``."""
    return os.environ.get(SERVER_ENV) or config.server


def server_token_file_setting(config: Config) -> Path | None:
    """The agent token's file: ``$AGENT_SAGA_SERVER_TOKEN_FILE``, else ``server_token_file``."""
    env = os.environ.get(SERVER_TOKEN_FILE_ENV)
    return Path(env) if env else config.server_token_file


def read_private_file(path: Path, what: str, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path``, a file only its owner may read or write (as ssh
    refuses a private key open to others: ``chmod 600``).

    Raises:
        ConfigurationError: the file cannot be read, or other users may read or write it; the
            message names the file as ``what`` (``"token file"``).
    """
    try:
        with path.open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if mode & 0o077:
                raise ConfigurationError(
                    f"the {what} {path} is open to other users (mode {mode & 0o777:o}); "
                    f"make it private: chmod 600 {path}"
                )
            return handle.read(limit)
    except OSError as exc:
        raise ConfigurationError(f"cannot read the {what} {path}: {exc}") from exc


def read_token_file(path: Path) -> str:
    """The token held in ``path`` (its text, surrounding whitespace removed).

    Raises:
        ConfigurationError: the file cannot be read, is open to other users than its owner
            (``chmod 600``), is not UTF-8 text or is empty; the message names the file.
    """
    raw = read_private_file(path, "token file", 4097)
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigurationError(f"the token file {path} is not UTF-8 text") from None
    if not token or len(raw) > 4096:
        raise ConfigurationError(f"the token file {path} holds no token")
    return token


def read_chain_key(path: Path) -> bytes:
    """The chain key held in ``path`` (see the module docstring for the format).

    Raises:
        ConfigurationError: the file cannot be read, can be read or written by other users than
            its owner (as ssh refuses a private key: ``chmod 600``), is not UTF-8 text, or holds
            a key shorter than 16 or longer than 4096 bytes; the message names the file.
    """
    raw = read_private_file(path, "chain key file", MAX_CHAIN_KEY_BYTES * 2 + 1)
    try:
        key = raw.decode("utf-8").strip().encode("utf-8")
    except UnicodeDecodeError:
        raise ConfigurationError(
            f"the chain key file {path} is not UTF-8 text (write the key as text, e.g. hex)"
        ) from None
    if not key:
        raise ConfigurationError(f"the chain key file {path} is empty")
    if not MIN_CHAIN_KEY_BYTES <= len(key) <= MAX_CHAIN_KEY_BYTES:
        raise ConfigurationError(
            f"the chain key in {path} must be at least {MIN_CHAIN_KEY_BYTES} and at most "
            f"{MAX_CHAIN_KEY_BYTES} bytes, it has {len(key)}"
        )
    return key


def configured_chain_key(config: Config | None = None) -> bytes | None:
    """The key named by ``$AGENT_SAGA_CHAIN_KEY_FILE`` or ``chain_key_file``, if either is set.

    Only a lookup without the environment variable reads the configuration file.
    """
    env = os.environ.get(CHAIN_KEY_FILE_ENV)
    if env:
        return read_chain_key(Path(env))
    path = (config or find_config()).chain_key_file
    return None if path is None else read_chain_key(path)


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
