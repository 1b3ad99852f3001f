"""What every party's client and the command line share: a service's URL checked before anything is sent, the
privagg service that answers at a URL, the statuses a request is retried on, and the refusal a client raises.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

from ..errors import ParameterError

RETRY_STATUSES = (429, 500, 502, 503, 504)  # the collector is busy or restarting: the same report is sent again
_HOST = re.compile(r"[\w.~%:-]+")  # a name, an IPv4 address, or an IPv6 one (its brackets taken off)


def check_url(field: str, url, schemes: tuple[str, ...] = ("http", "https")) -> str:
    """A service's URL as a user gave it, checked before anything is sent (a ParameterError naming ``field``):
    one of ``schemes``, a host, a port in 1..65535 if one is given, no query or fragment (a path is a prefix the
    routes follow, as behind a reverse proxy). Returned without its trailing slash."""
    from urllib.parse import urlsplit

    accepted = f"a URL {' or '.join(f'{s}://HOST[:PORT]' for s in schemes)} (a port in 1..65535; no query)"
    if not isinstance(url, str) or not url or any(c <= " " or c == "\x7f" for c in url):  # a space, a line end
        raise ParameterError(field, accepted, repr(url))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port out of range or not a number
        raise ParameterError(field, accepted, url) from None
    if parts.scheme.lower() not in schemes or not parts.hostname or not _HOST.fullmatch(parts.hostname) or \
            port == 0 or parts.query or parts.fragment:
        raise ParameterError(field, accepted, url)
    return url.rstrip("/")


def service_at(url: str, timeout: float = 10.0) -> str | None:
    """The privagg service that answers at ``url``, as its ``/healthz`` names itself (``privagg collector``,
    ``privagg analyzer``, ...); None if nothing answers there as one (no answer, or not privagg's)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/healthz", timeout=timeout) as answer:
            service = json.loads(answer.read()).get("service")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return service if isinstance(service, str) else None



def check_service(field: str, url: str, service: str, timeout: float = 10.0) -> str:
    """``url`` checked (:func:`check_url`), and refused where another privagg service answers (the collector's URL
    given as the analyzer's, ...), naming it; accepted where nothing answers as one (it may start later)."""
    url = check_url(field, url)
    found = service_at(url, timeout)
    if found is not None and found != f"privagg {service}":
        raise ParameterError(field, f"the {service}'s URL", f"{url}, where the {found} answers")
    return url


class SubmitError(Exception):
    """The collector refused the report (status 4xx), or could not be reached in the attempts allowed; or the
    task could not be fetched."""

    def __init__(self, status: int | None, detail: str) -> None:
        super().__init__(f"{status or 'no answer'}: {detail}")
        self.status, self.detail = status, detail

    def __reduce__(self):  # pickled (a demo's worker process raises it in the demo's: service/round_demo.py)
        return type(self), (self.status, self.detail)
