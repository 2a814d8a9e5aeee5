"""Secrets kept out of logs, MLflow parameters and Prefect's database.

A secret is any value of :data:`SECRET_KEYS` (notification URLs carry webhook tokens,
a Prometheus URL may carry ``user:password@``) and the credentials ``foreshock pull``
reads from the environment.  Three rules, one place:

- **Shown**, a URL is its scheme and host only (:func:`redact_url`), and only for schemes
  whose host is a host: an apprise URL such as ``tgram://<bot token>/<chat>`` or
  ``pagerduty://<integration key>@<api key>`` holds its secret where a host would be, so
  it shows as ``tgram://…``; a text without ``://`` shows as ``<redacted>``.
- **Recorded** (MLflow parameters), settings go through :func:`redact_settings`.
- **Handed to a flow** (Prefect stores a flow run's parameters), a secret travels as a
  reference to this process's memory (:func:`hold`), never as its value; a task in
  another process (a Dask worker, a served deployment's run) reads it again from the
  configuration file or the ``FORESHOCK_<SECTION>_<KEY>`` variable it came from.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import secrets
import urllib.parse
from typing import Any

# (section, key) of every configuration value that may hold a secret.
SECRET_KEYS: tuple[tuple[str, str], ...] = (("notify", "urls"), ("pull", "url"))

# Schemes whose host part names a machine (http, the apprise webhooks json/xml/form,
# mail): shown as scheme://host[:port].  Every other scheme shows as scheme://… .
HOST_SCHEMES = frozenset(
    {"http", "https", "json", "jsons", "xml", "xmls", "form", "forms", "mailto", "mailtos", "ntfy", "ntfys"}
)
REDACTED = "<redacted>"
HELD_PREFIX = "<held secret "

_HELD: dict[str, Any] = {}
_KEY = secrets.token_bytes(32)  # this process's own: references from elsewhere are not found here


def redact_url(url: object) -> str:
    """A URL as it may be shown: ``https://prometheus.example:9090``, ``tgram://…``,
    ``<redacted>`` (no ``://``: it could be anything)."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if not sep or not scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
        return REDACTED
    scheme = scheme.lower()
    if scheme not in HOST_SCHEMES:
        return f"{scheme}://…"
    try:
        parsed = urllib.parse.urlsplit(f"{scheme}://{rest}")
        host, port = parsed.hostname or "", parsed.port
    except ValueError:  # a malformed port or host: show nothing of it
        return f"{scheme}://…"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}{f':{port}' if port else ''}"


def redact_value(value: Any) -> Any:
    """A secret setting as it may be shown: each URL through :func:`redact_url`."""
    if isinstance(value, list | tuple):
        return [redact_url(v) for v in value]
    return redact_url(value) if value else value


def redact_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` (sections of keys) with every :data:`SECRET_KEYS` value
    redacted: what MLflow parameters and log lines may hold."""
    out = copy.deepcopy(settings)
    for section, key in SECRET_KEYS:
        if key in out.get(section, {}):
            out[section][key] = redact_value(out[section][key])
    return out


def hold(value: Any) -> str:
    """Keep ``value`` in this process's memory; the returned reference stands in for it
    in a flow's parameters (:func:`release` gives it back).  The same value gets the same
    reference (a keyed hash: a long-lived process holds each secret once, and the
    reference tells nothing about the value without this process's key)."""
    digest = hmac.new(_KEY, json.dumps(value, sort_keys=True).encode(), hashlib.sha256).hexdigest()
    token = f"{HELD_PREFIX}{digest[:20]}>"
    _HELD[token] = value
    return token


def is_held(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(HELD_PREFIX)


def release(token: str) -> tuple[bool, Any]:
    """``(found, value)`` of a :func:`hold` reference (not found in another process)."""
    return (token in _HELD), _HELD.get(token)


def hold_secrets(settings: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` with every non-empty :data:`SECRET_KEYS` value held."""
    out = copy.deepcopy(settings)
    for section, key in SECRET_KEYS:
        value = out.get(section, {}).get(key)
        if value:
            out[section][key] = hold(value)
    return out


def release_secrets(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with held references replaced by their values; a reference this
    process does not hold is dropped, so the value read from the file or the environment
    stays."""
    out = copy.deepcopy(settings)
    for section, key in SECRET_KEYS:
        value = out.get(section, {}).get(key)
        if is_held(value):
            found, held = release(value)
            if found:
                out[section][key] = held
            else:
                del out[section][key]
    return out
