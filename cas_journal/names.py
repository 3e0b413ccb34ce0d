"""User-chosen ids and ref names: validation, and a collision-free encoding into file names.

Any non-empty string of at most 1,024 UTF-8 bytes without NUL is a valid id. Before an id
becomes part of a path it is escaped byte by byte: ``0-9`` and ``a-z`` stay as they are;
any other byte becomes an escape character and two lowercase hex digits, the character
chosen by where the byte sorts: ``%`` below ``0``, ``^`` between ``9`` and ``a``, ``~``
above ``z``. So the encoding sorts exactly like the names it encodes (a directory listing
is sorted without decoding it), never contains ``/``, ``.`` or ``+`` (no component is
``..`` or a temp file) and never differs from another encoding only by letter case: no id
escapes the store or collides with another one, even on case-insensitive file systems.
Encodings longer than one path component allows are split into directories whose names
end in ``+``, so a file ``x`` and a directory ``x+/`` never clash.
"""

from __future__ import annotations

from .errors import InvalidInputError

MAX_ID_BYTES = 1024
MAX_REF_NAME_BYTES = 2048
COMPONENT_LIMIT = 200
DIRECTORY_SUFFIX = "+"

_TOKENS = tuple(
    chr(byte)
    if chr(byte) in "0123456789abcdefghijklmnopqrstuvwxyz"
    else ("%" if byte < 0x30 else "^" if byte < 0x61 else "~") + f"{byte:02x}"
    for byte in range(256)
)
_ESCAPES = frozenset("%^~")
_HEX_DIGITS = frozenset("0123456789abcdef")
_NAMESPACE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def validate_id(value: object, what: str = "id", max_bytes: int = MAX_ID_BYTES) -> str:
    """Return value if it is a valid user id, else raise InvalidInputError (a ValueError)."""
    # the common case, without encoding: an ASCII str has a byte a character (and
    # ``isascii`` reads a flag every str has); the rest gives the errors
    if type(value) is str and value.isascii() and 0 < len(value) <= max_bytes and "\0" not in value:
        return value
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
    """Escape text into one file-name-safe string that sorts like the text (may exceed
    one path component)."""
    return "".join([_TOKENS[byte] for byte in text.encode("utf-8")])


def decode_name(encoded: str) -> str:
    """Invert encode_name; raise ValueError on anything encode_name cannot have produced."""
    raw = bytearray()
    i = 0
    while i < len(encoded):
        char = encoded[i]
        if char in _ESCAPES:
            pair = encoded[i + 1 : i + 3]
            if len(pair) != 2 or not _HEX_DIGITS.issuperset(pair):
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
        # never split inside an escape
        if encoded[cut - 1] in _ESCAPES:
            cut -= 1
        elif encoded[cut - 2] in _ESCAPES:
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
