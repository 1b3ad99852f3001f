"""The services' configuration: a TOML file, then the environment, then the command line, each overriding
the one before.

    # privagg.toml
    [collector]
    db = "postgresql+psycopg://privagg@db.internal/collector"
    analyzer_url = "https://analyzer.internal:8443"
    port = 8080

    [analyzer]
    db = "sqlite:///analyzer.db"
    workers = 2

Environment: ``PRIVAGG_COLLECTOR_DB``, ``PRIVAGG_ANALYZER_WORKERS``, ... (``PRIVAGG_<ROLE>_<FIELD>``; a yes/no field
takes true/false, 1/0 or yes/no). The collector token, a secret both services share, and the operator token
are best given by the environment (``PRIVAGG_COLLECTOR_COLLECTOR_TOKEN``, ``PRIVAGG_ANALYZER_COLLECTOR_TOKEN``,
``PRIVAGG_<ROLE>_OPERATOR_TOKEN``, ``PRIVAGG_ANALYZER_RESULT_TOKEN``, ``PRIVAGG_S2_RESULT_TOKEN``) or the file, not
on a command line other users can list. The analyzer's key-encryption key comes from ``PRIVAGG_KEK`` or the file
named by ``kek_file`` (:mod:`privagg.service.keys`), never from the config file itself.

Connections (:class:`privagg.service.web.Limits`): ``header_timeout`` (10 s), ``body_timeout`` (30 s at the
collector, 300 s at the analyzer, whose batches reach 1 GiB), ``idle_timeout`` (5 s), ``max_connections``
(10,000, lowered to fit the open-file limit) and ``max_requests`` (1,000 in flight).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ParameterError, check_integer
from .calls import check_url
from .storage import ROLES, default_url

if TYPE_CHECKING:
    from .web import Limits

DEFAULT_PORTS = {"collector": 8080, "analyzer": 8081, "sharing": 8082, "s1": 8083, "s2": 8084}
# The settings only some roles use; a file or environment setting given to another role is refused, not ignored (a
# result token set for the sharing server, whose result route takes none, would leave it open while seeming set).
ROLE_FIELDS = {"analyzer_url": ("collector",), "analyzer_ca": ("collector",), "second_ca": ("s1",),
               "workers": ("analyzer",), "dask_scheduler": ("analyzer",), "batch_interval": ("collector",),
               "batch_quiet": ("collector",), "max_batch_reports": ("collector",),
               "partition_root": ("collector", "analyzer"), "memory_budget": ("collector", "analyzer"),
               "kek_file": ("analyzer", "s2"), "collector_token": ("collector", "analyzer"),
               "result_token": ("analyzer", "s2")}


@dataclass(frozen=True)
class ServiceConfig:
    role: str
    db: str
    host: str = "127.0.0.1"
    port: int = 0
    tls_cert: str | None = None
    tls_key: str | None = None
    analyzer_url: str | None = None  # the collector's analyzer
    analyzer_ca: str | None = None  # the CA file the collector checks the analyzer's TLS certificate with
    second_ca: str | None = None  # the CA file S1 checks S2's TLS certificate with, handing over (TSS)
    collector_token: str | None = None  # the secret the collector shows the analyzer with each batch (both roles)
    workers: int | None = None  # the analyzer's decryption processes (default: one per core)
    dask_scheduler: str | None = None  # the analyzer opens messages on this Dask cluster instead
    batch_interval: float = 1.0  # seconds between the collector's batch checks
    batch_quiet: float = 2.0  # a local task's batch is released once no report arrived for this long...
    max_batch_reports: int = 100_000  # ... or this many wait (never fewer than the minimum; shuffle tasks: one batch)
    partition_root: str | None = None  # collector and analyzer: the shared directory of batches too large to send whole
    memory_budget: int = 2 << 30  # bytes a batch (collector) or one partition (analyzer) may take in memory
    max_body_bytes: int = 1 << 20  # the largest request body (a report at the collector, 1 GiB batches otherwise)
    header_timeout: float = 10.0  # seconds until a request's headers are complete (from its connection or first byte)
    body_timeout: float = 30.0  # seconds from then until its body is complete (the analyzer's default: 300)
    idle_timeout: float = 5.0  # seconds a kept-alive connection may wait for its next request
    max_connections: int = 10_000  # connections held at once (the oldest idle one closed for a new one)
    max_requests: int = 1_000  # requests in flight at once; one more waits up to 10 s, then is refused as busy
    operator_token: str | None = None  # the secret /metrics and the collector's status route ask for, if set
    kek_file: str | None = None  # the analyzer's key-encryption key's file (default: PRIVAGG_KEK; keys.py)
    result_token: str | None = None  # the secret the analyzer's and S2's result routes ask for (bearer)
    api_docs: bool = False  # serve /docs, /redoc and /openapi.json
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ParameterError("role", f"one of {', '.join(ROLES)}", self.role)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ParameterError("tls_cert/tls_key", "given together", f"{self.tls_cert}, {self.tls_key}")
        for name in ("db", "host") + tuple(n for n in ("tls_cert", "tls_key", "analyzer_url", "analyzer_ca", "second_ca",
                                                      "dask_scheduler", "kek_file", "result_token",
                                                      "partition_root")
                                                      if getattr(self, n) is not None):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ParameterError(name, "a non-empty string", getattr(self, name))
        if self.analyzer_url is not None:
            check_url("analyzer_url", self.analyzer_url)
        if self.dask_scheduler is not None:  # Dask's address: its TCP or TLS scheme, or a bare HOST:PORT (TCP)
            check_url("dask_scheduler", self.dask_scheduler if "://" in self.dask_scheduler else
                      f"tcp://{self.dask_scheduler}", ("tcp", "tls"))
        for name in ("port", "max_body_bytes", "max_batch_reports", "workers", "max_connections", "max_requests",
                     "memory_budget"):
            if getattr(self, name) is not None and type(getattr(self, name)) is not int:
                raise ParameterError(name, "an integer", repr(getattr(self, name)))
        check_integer("port", self.port, 0, 65535)
        check_integer("max_body_bytes", self.max_body_bytes, 1)
        check_integer("max_batch_reports", self.max_batch_reports, 1)
        check_integer("memory_budget", self.memory_budget, 1 << 20)
        check_integer("max_connections", self.max_connections, 1, 1_000_000)
        check_integer("max_requests", self.max_requests, 1, 1_000_000)
        if self.workers is not None:
            check_integer("workers", self.workers, 0, 1024)
        for name in ("batch_interval", "batch_quiet"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 86_400:
                raise ParameterError(name, "a number of seconds in (0, 86400)", value)
        for name in ("header_timeout", "body_timeout", "idle_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3_600:
                raise ParameterError(name, "a number of seconds in (0, 3600]", value)
        for name in ("collector_token", "operator_token", "result_token"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or len(value) < 16):
                raise ParameterError(name, "a secret of at least 16 characters", "(too short)")
        if not isinstance(self.api_docs, bool):
            raise ParameterError("api_docs", "true or false", repr(self.api_docs))
        if self.log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ParameterError("log_level", "DEBUG, INFO, WARNING or ERROR", self.log_level)

    def limits(self) -> Limits:
        """The connection limits and timeouts, as :func:`privagg.service.web.add_operations` takes them."""
        from .web import Limits

        return Limits(self.header_timeout, self.body_timeout, self.idle_timeout, self.max_connections,
                      self.max_requests)


CONFIG_BYTES = 1 << 20  # the largest configuration file read
YES_NO = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def load_config(role: str, file: Path | None = None, **given: Any) -> ServiceConfig:
    """The configuration of ``role``: defaults < ``file``'s ``[role]`` table < environment < ``given``
    (command-line values; None means not given).

    Refused, naming it: a file that is not UTF-8 TOML, a table that is not a role's (``[analyser]``), a field
    that is not a setting, an environment variable ``PRIVAGG_<ROLE>_<NAME>`` whose name is not one, and a
    setting of another role (:data:`ROLE_FIELDS`), from the file or the environment."""
    types = {f.name: f.type for f in fields(ServiceConfig)}
    settings = sorted(set(types) - {"role"})
    own = [name for name in settings if role in ROLE_FIELDS.get(name, (role,))]  # the settings this role uses
    values: dict[str, Any] = {"db": default_url(role), "port": DEFAULT_PORTS.get(role, 0),
                              "max_body_bytes": (1 << 20) if role == "collector" else (1 << 30),
                              "body_timeout": 30.0 if role == "collector" else 300.0}
    where: dict[str, str] = {}  # each setting the file or the environment gave, and where
    if file is not None:
        accepted = f"a readable UTF-8 TOML file of at most {CONFIG_BYTES >> 20} MiB"
        try:
            with open(file, "rb") as text:  # at most CONFIG_BYTES, not all of /dev/zero
                data = text.read(CONFIG_BYTES + 1)
            if len(data) > CONFIG_BYTES:
                raise ParameterError("config", accepted, f"{file} (longer)")
            tables = tomllib.loads(data.decode("utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise ParameterError("config", accepted, f"{file} ({getattr(err, 'strerror', None) or err})") from None
        odd = sorted(name for name, table in tables.items() if name not in ROLES or not isinstance(table, dict))
        if odd:
            raise ParameterError("config", f"tables among [{'], ['.join(ROLES)}]", f"{file}: {', '.join(odd)}")
        table = tables.get(role, {})
        unknown = set(table) - set(settings)
        if unknown:
            raise ParameterError("config", f"fields among {own}", sorted(unknown))
        values.update(table)
        where.update({name: f"{name} ([{role}] in {file})" for name in table})
    prefix = f"PRIVAGG_{role.upper()}_"
    unknown = sorted(n for n in os.environ if n.startswith(prefix) and n[len(prefix):].lower() not in settings)
    if unknown:
        raise ParameterError(unknown[0], f"the name of a setting ({prefix} and one of "
                             f"{', '.join(s.upper() for s in own)})", "an unknown name (correct or unset it)")
    for name, kind in types.items():
        variable = f"{prefix}{name.upper()}"
        text = os.environ.get(variable)
        if text is None or name == "role":
            continue
        where[name] = variable
        if str(kind) == "bool":
            if text.lower() not in YES_NO:
                raise ParameterError(variable, "true or false", text)
            values[name] = YES_NO[text.lower()]
            continue
        number = "an integer" if "int" in str(kind) else "a number" if "float" in str(kind) else None
        try:
            values[name] = text if number is None else int(text) if number == "an integer" else float(text)
        except ValueError:
            raise ParameterError(variable, number, text) from None
    for name, source in where.items():
        if role not in ROLE_FIELDS.get(name, (role,)):
            raise ParameterError(source, f"a setting of {' or '.join(ROLE_FIELDS[name])} only (it does nothing "
                                 f"for {role})", "(set)" if name.endswith("token") else values[name])
    values.update({k: v for k, v in given.items() if v is not None})
    return ServiceConfig(role=role, **values)


def describe(config: ServiceConfig) -> dict[str, Any]:
    """The configuration as logged at start-up: a database URL without its password, the analyzer's URL without
    one either, no token."""
    from urllib.parse import urlsplit

    from .storage import shown_url

    shown = dataclasses.asdict(config)
    shown["db"] = shown_url(config.db)
    parts = urlsplit(config.analyzer_url or "")
    if parts.password is not None:
        shown["analyzer_url"] = parts._replace(netloc=f"{parts.username}:***@{parts.netloc.rpartition('@')[2]}"
                                               ).geturl()
    for secret in ("collector_token", "operator_token", "result_token"):
        shown[secret] = None if getattr(config, secret) is None else "(set)"
    return shown
