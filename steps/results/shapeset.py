"""The published benchmark shape set, ``bench/shapes.toml``: loaded, validated, selected.

    from steps import shapeset
    shape_set = shapeset.load()                  # bench/shapes.toml, validated
    for shape_class in shape_set.classes:        # in the file's order
        print(shape_class.name, shape_class.shapes)
    shapeset.parse_shapes("1000x1500x700,64x2048x2048")   # ad-hoc shapes (--shapes)

A file that breaks a rule raises ``ShapeSetError`` with one line naming the file, the class
and the shape. The rules: a ``version`` and a list of ``[[class]]`` tables, each with a
unique ``name`` (lower case, digits, hyphens), a non-empty ``rationale`` and a non-empty list
of ``shapes`` as [M, N, K] of positive integers; each of A, B, C below 2^31 elements (what
every step accepts, schedules.config.check_sizes); A + B + C at most ``MAX_BYTES``; no shape
twice in the whole set. No GPU, no TVM: the CLI checks a run's input with it before
anything is built.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (pyproject.toml)
    import tomli as tomllib

SHAPES_PATH = Path(__file__).resolve().parents[2] / "bench" / "shapes.toml"
VERSION = 1
MAX_BYTES = 1 << 30  # A, B and C of one shape together: "fits easily" on any GPU the ladder times
MAX_ELEMENTS = 2**31  # schedules.config.MAX_ELEMENTS, repeated so this module needs no TVM
FLOAT_BYTES = 4
AD_HOC = "ad hoc"  # the class of shapes given with --shapes
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


class ShapeSetError(ValueError):
    """A shape set or a shape that breaks a rule; the message is one line."""


@dataclass(frozen=True)
class ShapeClass:
    name: str
    rationale: str
    shapes: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class ShapeSet:
    classes: tuple[ShapeClass, ...]
    path: Path
    sha256: str

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.classes]

    def shapes(self) -> list[tuple[str, tuple[int, int, int]]]:
        """(class name, shape) for every shape, in the file's order."""
        return [(c.name, s) for c in self.classes for s in c.shapes]

    def select(self, names: list[str]) -> "ShapeSet":
        """Only the named classes, in the file's order; an unknown name is a ShapeSetError."""
        unknown = [n for n in names if n not in self.names]
        if unknown:
            raise ShapeSetError(f"unknown class {unknown[0]!r}; the set has {', '.join(self.names)}")
        return ShapeSet(tuple(c for c in self.classes if c.name in names), self.path, self.sha256)

    def class_of(self, shape) -> str | None:
        return next((c.name for c in self.classes if tuple(shape) in c.shapes), None)


def shape_text(shape) -> str:
    return "x".join(str(n) for n in shape)


def check_shape(shape) -> tuple[int, int, int]:
    """[M, N, K] -> (M, N, K), or a one-line ShapeSetError: positive integers, each matrix
    below 2^31 elements, all three together at most MAX_BYTES."""
    if not (isinstance(shape, (list, tuple)) and len(shape) == 3):
        raise ShapeSetError(f"a shape is [M, N, K], got {shape!r}")
    for name, value in zip("MNK", shape):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ShapeSetError(f"{name} must be a positive integer, got {value!r}")
    M, N, K = shape
    for name, rows, cols in (("A", M, K), ("B", K, N), ("C", M, N)):
        if rows * cols >= MAX_ELEMENTS:
            raise ShapeSetError(f"{name} has {rows * cols} elements; each matrix must stay below 2^31 "
                                "(TVM indexes buffers with int32)")
    nbytes = FLOAT_BYTES * (M * K + K * N + M * N)
    if nbytes > MAX_BYTES:
        raise ShapeSetError(f"A, B and C take {nbytes / 2**30:.2f} GiB; a benchmark shape must fit in "
                            f"{MAX_BYTES / 2**30:g} GiB")
    return M, N, K


def parse(text: str, path: Path = SHAPES_PATH) -> ShapeSet:
    """Validate the text of a shape set (see the module docstring for the rules)."""
    where = Path(path).name
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ShapeSetError(f"{where}: not TOML: {' '.join(str(exc).split())}") from None
    unknown = sorted(set(data) - {"version", "class"})
    if unknown:
        raise ShapeSetError(f"{where}: unknown top-level key {unknown[0]!r} (expected version and [[class]])")
    if data.get("version") != VERSION:
        raise ShapeSetError(f"{where}: version must be {VERSION}, got {data.get('version')!r}")
    tables = data.get("class")
    if not (isinstance(tables, list) and tables and all(isinstance(t, dict) for t in tables)):
        raise ShapeSetError(f"{where}: no [[class]] tables")
    classes, seen = [], {}
    for index, table in enumerate(tables, 1):
        name = table.get("name")
        label = f"{where}: class {name!r}" if isinstance(name, str) else f"{where}: class #{index}"
        extra = sorted(set(table) - {"name", "rationale", "shapes"})
        if extra:
            raise ShapeSetError(f"{label}: unknown key {extra[0]!r} (expected name, rationale, shapes)")
        if not (isinstance(name, str) and _NAME.fullmatch(name)):
            raise ShapeSetError(f"{label}: name must be lower-case letters, digits and hyphens, got {name!r}")
        if name in {c.name for c in classes}:
            raise ShapeSetError(f"{label}: a second class of that name")
        rationale = table.get("rationale")
        if not (isinstance(rationale, str) and rationale.strip()):
            raise ShapeSetError(f"{label}: needs a rationale (why these shapes)")
        raw = table.get("shapes")
        if not (isinstance(raw, list) and raw):
            raise ShapeSetError(f"{label}: needs a non-empty list of shapes [M, N, K]")
        shapes = []
        for number, shape in enumerate(raw, 1):
            try:
                shape = check_shape(shape)
            except ShapeSetError as exc:
                raise ShapeSetError(f"{label}: shape {number} {shape!r}: {exc}") from None
            if shape in seen:
                raise ShapeSetError(f"{label}: shape {shape_text(shape)} is already in class {seen[shape]!r}")
            seen[shape] = name
            shapes.append(shape)
        classes.append(ShapeClass(name, " ".join(rationale.split()), tuple(shapes)))
    digest = hashlib.sha256(text.encode()).hexdigest()
    return ShapeSet(tuple(classes), Path(path), digest)


def load(path: Path = SHAPES_PATH) -> ShapeSet:
    """The shape set in `path` (default bench/shapes.toml), validated."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ShapeSetError(f"cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    return parse(text, path)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """'1000x1500x700,64x2048x2048' -> [(1000, 1500, 700), (64, 2048, 2048)] (x or ×), each checked."""
    shapes = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*[x×]\s*(\d+)\s*[x×]\s*(\d+)\s*", part)
        if not match:
            raise ShapeSetError(f"cannot read shape {part.strip()!r}: use MxNxK, e.g. 1000x1500x700")
        try:
            shapes.append(check_shape([int(g) for g in match.groups()]))
        except ShapeSetError as exc:
            raise ShapeSetError(f"shape {part.strip()}: {exc}") from None
    return list(dict.fromkeys(shapes))
