#!/usr/bin/env python3
"""Is a privagg service ready? Exit 0 if its ``/readyz`` answers 200, 1 otherwise: for a container's
HEALTHCHECK, a systemd ``ExecStartPost=`` or a load balancer's script. Standard library only.

    python3 healthcheck.py                                   # http://127.0.0.1:8080 (the collector)
    python3 healthcheck.py http://127.0.0.1:8081             # the analyzer
    python3 healthcheck.py https://collector.example:8443 --cafile ca.pem
    python3 healthcheck.py http://127.0.0.1:8080 --wait 60   # keep asking for up to 60 s (start-up)

    # Dockerfile
    HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \\
        CMD ["python3", "/opt/privagg/deploy/healthcheck.py", "http://127.0.0.1:8080"]

``/readyz`` is 503 while the service's last write failed (a full disk) or its database does not answer within
a second; it answers from the service's event loop, never queued behind requests, so a timeout here means
the process itself is stuck. Print: one line, the status and the service's reason when it is not ready.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def check(url: str, timeout: float, context: ssl.SSLContext | None) -> tuple[bool, str]:
    """(ready, one line saying why) for the service at ``url``."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/readyz", timeout=timeout, context=context) as answer:
            return answer.status == 200, f"{answer.status} ready"
    except urllib.error.HTTPError as err:
        try:
            detail = json.loads(err.read()).get("detail", "")
        except ValueError:
            detail = ""
        return False, f"{err.code} not ready{': ' + detail if detail else ''}"
    except (urllib.error.URLError, OSError) as err:
        return False, f"no answer ({getattr(err, 'reason', err)})"


def _loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Exit 0 when a privagg service's /readyz answers 200.")
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:8080", help="the service's base URL")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds for one answer (default 3)")
    parser.add_argument("--wait", type=float, default=0.0, help="ask again until ready or this many seconds "
                                                                "passed (default 0: ask once)")
    parser.add_argument("--cafile", help="CA file the service's TLS certificate is checked against")
    parser.add_argument("--insecure", action="store_true", help="loopback URLs only: do not check the TLS "
                        "certificate (it names the public host, not 127.0.0.1)")
    args = parser.parse_args(argv)
    if args.insecure and not _loopback(args.url):
        parser.error("--insecure is only for a loopback URL (127.0.0.1, ::1, localhost)")
    context = None
    if args.url.startswith("https:"):
        context = ssl.create_default_context(cafile=args.cafile)
        if args.insecure:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + args.wait
    while True:
        ready, line = check(args.url, args.timeout, context)
        if ready or time.monotonic() >= deadline:
            print(line)
            return 0 if ready else 1
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
