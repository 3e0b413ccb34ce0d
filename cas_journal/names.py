"""User-chosen ids and ref names: validation, and a collision-free encoding into file names.

Any non-empty string of at most 1,024 UTF-8 bytes without NUL is a valid id. Before an id
becomes part of a path it is percent-encoded: only ``a-z 0-9 - _`` stay as they are, and
every other byte (``.`` included) becomes ``%XX`` with uppercase hex. The result never
contains ``/`` or ``.`` (so no component is ``..`` or a temp file) and never differs from
another encoding only by letter case, so no id escapes the store or collides with another
one, even on case-insensitive file systems. Encodings longer than one path component allows
are split into directories whose names end in ``+`` (a character the encoding never
emits), so a file ``x`` and a directory ``x+/`` never clash.
"""

from __future__ import annotations

from .errors import InvalidInputError

MAX_ID_BYTES = 1024
MAX_REF_NAME_BYTES = 2048
COMPONENT_LIMIT = 200
DIRECTORY_SUFFIX = "+"

_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-_")
_NAMESPACE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def validate_id(value: object, what: str = "id", max_bytes: int = MAX_ID_BYTES) -> str:
    """Return value if it is a valid user id, else raise InvalidInputError (a ValueError)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidInputError(f"{what} must not be empty")
    if "\0" in value:
        raise InvalidInputError(f"{what} must not contain NUL")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} is not valid Unicode (lone surrogate)") from exc
    if size > max_bytes:
        raise InvalidInputError(f"{what} is {size} UTF-8 bytes; the limit is {max_bytes}")
    return value


def split_ref_name(name: object) -> tuple[str, str]:
    """Split ``"namespace/rest"`` after validating it; raise InvalidInputError if malformed."""
    validate_id(name, "ref name", MAX_REF_NAME_BYTES)
    assert isinstance(name, str)
    namespace, slash, rest = name.partition("/")
    if not slash or not namespace or not rest or not _NAMESPACE_CHARS.issuperset(namespace):
        raise InvalidInputError(f"ref name {name!r} must look like 'namespace/name'")
    return namespace, rest


def encode_name(text: str) -> str:
    """Percent-encode text into a single file-name-safe string (may exceed one component)."""
    out: list[str] = []
    for byte in text.encode("utf-8"):
        if byte in _SAFE:
            out.append(chr(byte))
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def decode_name(encoded: str) -> str:
    """Invert encode_name; raise ValueError on anything encode_name cannot have produced."""
    raw = bytearray()
    i = 0
    while i < len(encoded):
        char = encoded[i]
        if char == "%":
            pair = encoded[i + 1 : i + 3]
            if (
                len(pair) != 2
                or pair.upper() != pair
                or any(c not in "0123456789ABCDEF" for c in pair)
            ):
                raise ValueError(f"bad escape in encoded name {encoded!r}")
            raw.append(int(pair, 16))
            i += 3
        else:
            raw.append(ord(char))
            i += 1
    text = raw.decode("utf-8")
    if encode_name(text) != encoded:
        raise ValueError(f"not a canonical encoded name: {encoded!r}")
    return text


def name_to_parts(text: str) -> list[str]:
    """Encode text into path components: directories (ending in ``+``) then a file name."""
    encoded = encode_name(text)
    parts: list[str] = []
    while len(encoded) > COMPONENT_LIMIT:
        cut = COMPONENT_LIMIT
        # never split inside a %XX escape
        if encoded[cut - 1] == "%":
            cut -= 1
        elif encoded[cut - 2] == "%":
            cut -= 2
        parts.append(encoded[:cut] + DIRECTORY_SUFFIX)
        encoded = encoded[cut:]
    parts.append(encoded)
    return parts


def parts_to_name(parts: list[str]) -> str:
    """Invert name_to_parts; raise ValueError if the components are not a valid encoding."""
    if not parts:
        raise ValueError("no path components")
    for directory in parts[:-1]:
        if not directory.endswith(DIRECTORY_SUFFIX):
            raise ValueError(f"directory component {directory!r} lacks the '+' suffix")
    joined = "".join(part[: -len(DIRECTORY_SUFFIX)] for part in parts[:-1]) + parts[-1]
    text = decode_name(joined)
    if name_to_parts(text) != parts:
        raise ValueError("path components are not the canonical split")
    return text
