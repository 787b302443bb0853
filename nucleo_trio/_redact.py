"""Secrets kept out of everything the runtime prints: URLs, settings, log records.

A URL the runtime holds (a Redis address, an OpenAI-compatible base URL, a database's
connection string) may carry a credential in two places: its userinfo
(``redis://:pw@host``, ``https://user:pw@gateway/v1``, ``https://token@host``) and its query
(``?password=pw``, ``?api_key=k``). :func:`redact_url` is the one place that masks both; every
repr, error message, status row and log line that shows such a URL shows it through here.

The choices, once: a userinfo with a password keeps its user and masks the password
(``user:***@``), since the user says which account is in play and is rarely the secret; a
userinfo with no password is masked whole (``***@``), since a lone user part is where tokens go.
A query or fragment parameter whose name looks like a credential (see :func:`is_credential_key`)
keeps its name and loses its value (``api_key=***``). Nothing else changes: the scheme, host,
port, path and the other parameters are shown as written, so the address stays useful.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

__all__ = [
    "MASK",
    "RedactingFilter",
    "install_redacting_filter",
    "is_credential_key",
    "redact_repr",
    "redact_text",
    "redact_url",
    "redacted_repr",
]

MASK = "***"

# Names (lower-cased, with everything but letters and digits dropped) that are credentials
# whole, and endings that make a name one (client_secret, x-api-key, refresh_token,
# X-Amz-Signature, signing_key). Masking a harmless value by mistake costs a less useful
# message; missing a secret costs the secret, so the endings are generous.
_CREDENTIAL_NAMES = frozenset({"pass", "sig", "pw"})
_CREDENTIAL_ENDINGS = (
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "secrets",
    "token",
    "key",
    "keys",
    "auth",
    "authorization",
    "signature",
    "credential",
    "credentials",
)

# A scheme (RFC 3986: a letter, then letters, digits, + - .) and the "//" of an authority.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
# A URL inside free text: a scheme and "//", up to whitespace or a quote or bracket that ends it.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]*")
# A quoted string in a repr, either quote, with its escapes.
_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
# A "name=value" pair inside free text (a libpq conninfo, a DSN, an object's repr): a quoted
# value or a bare one (which ends at a quote, so the repr of the string holding it stays whole).
_PAIR_IN_TEXT = re.compile(
    rf"(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<eq>\s*=\s*)(?P<value>{_QUOTED}|[^\s&;,'\"()\[\]{{}}]+)"
)
# A mapping's entry in a repr: a quoted key, the colon, and a quoted value, a flat list or tuple
# of scalars, or a bare scalar (a number, None, True).
_ENTRY_IN_REPR = re.compile(
    rf"(?P<key>(?P<quote>['\"])(?P<name>[^'\"\\]{{1,200}})(?P=quote))(?P<sep>\s*:\s*)"
    rf"(?P<value>{_QUOTED}|[\[(](?:{_QUOTED}|[^\[\]()'\"])*[\])]|[^\s,'\"()\[\]{{}}]+)"
)
_SEPARATORS = re.compile(r"([&;])")


def is_credential_key(name: object) -> bool:
    """Whether a setting or query parameter named ``name`` holds a credential.

    Case and punctuation do not count (``API-Key``, ``api_key`` and ``apikey`` are one name);
    a name that is one of the credential words, or ends in one (``password``, ``secret``,
    ``token``, ``key``, ``auth``, ``signature``, ``credential(s)``; ``pass``, ``pw`` and ``sig``
    only whole), is one."""
    if not isinstance(name, str):
        return False
    plain = "".join(char for char in unquote_plus(name).lower() if char.isalnum())
    return plain in _CREDENTIAL_NAMES or plain.endswith(_CREDENTIAL_ENDINGS)


def _redact_parameters(text: str) -> str:
    """``a=1&token=x;b`` with the credentials' values masked, separators kept as written."""
    pieces = _SEPARATORS.split(text)
    for index in range(0, len(pieces), 2):
        name, equals, value = pieces[index].partition("=")
        if equals and value and is_credential_key(name):
            pieces[index] = f"{name}={MASK}"
    return "".join(pieces)


def _redact_userinfo(authority: str) -> str:
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return authority
    user, colon, _ = userinfo.partition(":")
    if colon:
        return f"{user}:{MASK}@{host}"
    return f"{MASK}@{host}"


def redact_url(url: str) -> str:
    """``url`` with its userinfo's password (or a lone userinfo) and the values of its
    credential-like query and fragment parameters replaced by ``***``.

    Works on the text, so a URL no parser accepts (a bad port, a stray bracket) is masked all
    the same; a string that is not a URL (no scheme, no query) comes back unchanged."""
    rest = url
    head = ""
    scheme = _SCHEME.match(rest)
    if scheme is not None:
        head, rest = rest[: scheme.end()], rest[scheme.end() :]
    if rest.startswith("//"):
        end = len(rest)
        for mark in "/?#":
            found = rest.find(mark, 2)
            if found != -1:
                end = min(end, found)
        head += "//" + _redact_userinfo(rest[2:end])
        rest = rest[end:]
    before_fragment, hash_mark, fragment = rest.partition("#")
    path, question, query = before_fragment.partition("?")
    if question:
        path += "?" + _redact_parameters(query)
    if hash_mark:
        path += "#" + (_redact_parameters(fragment) if "=" in fragment else fragment)
    return head + path


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url` (an exception's
    message, a log line); the rest of the text is left as it is."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)


def _shown_value(name: str, value: str) -> str:
    """``value`` as written, or ``***`` when ``name`` is a credential's and it holds one."""
    if not is_credential_key(name) or value in ("None", "''", '""'):
        return value
    return MASK


def _mask_entry(match: re.Match[str]) -> str:
    shown = _shown_value(match.group("name"), match.group("value"))
    return f"{match.group('key')}{match.group('sep')}{shown if shown != MASK else repr(MASK)}"


def _mask_pair(match: re.Match[str]) -> str:
    shown = _shown_value(match.group("name"), match.group("value"))
    return f"{match.group('name')}{match.group('eq')}{shown}"


def redact_repr(text: str) -> str:
    """A repr (or any text) with its credentials masked: the URLs in it
    (:func:`redact_text`), the values of a mapping's credential-like keys
    (``{'password': 'pw'}``, a flat list of them too), and ``name=value`` pairs whose name is
    one (``password=pw`` in a libpq conninfo, ``token='t'`` in an object's repr). ``None`` and
    an empty string are shown, saying nothing is set. It reads the text, not the object, so a
    value nested however deep, or one whose own repr holds a URL, is masked all the same."""
    text = _ENTRY_IN_REPR.sub(_mask_entry, redact_text(text))
    return _PAIR_IN_TEXT.sub(_mask_pair, text) if "=" in text else text


def redacted_repr(value: object, key: object = None) -> str:
    """``repr(value)`` fit to show (:func:`redact_repr`), for a message or a repr that names a
    value as written; ``'***'`` whole when ``key``, the name it is the value of, is
    credential-like."""
    if is_credential_key(key) and value not in (None, ""):
        return repr(MASK)
    return redact_repr(repr(value))


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record with the URLs in its message (and in its
    traceback) redacted; a record with nothing to redact is passed untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logging module's to report
            return True
        shown = redact_text(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            trace = logging.Formatter().formatException(record.exc_info)
            if redact_text(trace) != trace:
                record.exc_text = redact_text(trace)
        return True


def install_redacting_filter(*names: str) -> None:
    """Put one :class:`RedactingFilter` on each logger named (once, however often asked), so a
    library that logs the URLs it requests (httpx logs each request's URL at INFO) never logs
    a credential the URL carries. A logger's filters see only the records logged to it, so each
    logger that writes URLs is named."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactingFilter) for existing in logger.filters):
            logger.addFilter(RedactingFilter())
