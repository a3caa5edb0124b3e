"""Reading user documents (task files, run files) defensively.

- Invalid UTF-8 is an error naming the line and byte offset, not a ``UnicodeDecodeError``.
- YAML aliases may repeat a value (``yaml.dump`` writes them for shared lists), but a document
  whose aliases expand it more than ``MAX_EXPANSION`` times (an alias bomb: a few hundred bytes
  that become gigabytes) or refer to themselves is refused before anything is built.
- Nesting deeper than ``MAX_DEPTH`` (aliases expanded) is refused in YAML and JSON.
- Plain YAML scalars in id and text fields keep their source text: ``id: 010`` is ``"010"``,
  not 8, and ``id: NO`` is ``"NO"``, not False (a date-like ``id: 2024-02-30`` too).
- Values PyYAML's constructors crash on (``!!int abc``, ``!!timestamp zzz``, ``2024-02-30``, an
  integer of 4,301+ digits) are "not valid YAML" errors at their line, the value not echoed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from atlasrun.errors import InputError

MAX_DEPTH = 64  # deeper than any task or run file needs; far below Python's recursion limit
MAX_EXPANSION = 10  # expanded nodes per written node, beyond a small allowance
EXPANSION_ALLOWANCE = 100_000
STR_TAG = "tag:yaml.org,2002:str"
_COERCED_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("int", "float", "bool", "timestamp")}

_MAX_INT_BITS = 14_000  # about 4,300 decimal digits: Python's limit for int <-> str conversion
_HUGE_INT = "an integer of more than 4,300 digits"
_QUOTE_IT = "quote the value to keep it as text"

# A path into a document: keys, or "*" for any list item / mapping value.
Path = tuple[str, ...]


def decode(data: bytes, where: str) -> str:
    """UTF-8 text (a leading BOM dropped), or an error naming the line of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"not valid UTF-8 at line {line} (byte offset {exc.start})", where=where) from exc


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with a nesting limit while composing (aliases are checked after, see ``_measure``)."""

    depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """A value PyYAML's constructors crash on (``!!int abc``, ``2024-02-30``, an integer of
        4,301+ digits, ``!!bool maybe``) is a YAML error at its line; the value is not echoed."""
        try:
            value = super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, KeyError, AttributeError, TypeError, OverflowError) as exc:
            tag = node.tag.removeprefix("tag:yaml.org,2002:")
            what = _HUGE_INT if "4300 digits" in str(exc) else f"not a valid {tag}"
            problem = f"{what}: {_QUOTE_IT}"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from exc
        # 0x/0b/sexagesimal integers are built without the digit limit, but printing one fails
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            raise yaml.constructor.ConstructorError(None, None, f"{_HUGE_INT}: {_QUOTE_IT}", node.start_mark)
        return value


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _measure(root: Node) -> None:
    """Refuse alias bombs, self-referring aliases and deep expanded nesting, without expanding:
    each distinct node is measured once (its expanded size and depth are memoised)."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
    unique = 0
    limit = 0

    def measure(node: Node, active: set[int]) -> tuple[int, int]:
        nonlocal unique
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise yaml.composer.ComposerError(None, None, "an alias refers to itself", node.start_mark)
        active.add(key)
        unique += 1
        size, depth = 1, 1
        for child in _children(node):
            child_size, child_depth = measure(child, active)
            size, depth = size + child_size, max(depth, child_depth + 1)
            if depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels (aliases expanded)", node.start_mark
                )
        active.discard(key)
        sizes[key] = size, depth
        return size, depth

    total, _ = measure(root, set())
    limit = MAX_EXPANSION * unique + EXPANSION_ALLOWANCE
    if total > limit:
        raise yaml.composer.ComposerError(
            None,
            None,
            f"aliases expand this document to {total:,} values from {unique:,} written "
            f"(limit {limit:,}): write the values out",
            root.start_mark,
        )


def _keep_text(node: Node, paths: Sequence[Path]) -> None:
    """Retag plain int/float/bool scalars at ``paths`` as strings (their source text)."""
    if not paths:
        return
    if isinstance(node, ScalarNode):
        if () in paths and node.style is None and node.tag in _COERCED_TAGS:
            node.tag = STR_TAG
        return
    children: list[tuple[str | None, Node]] = []
    if isinstance(node, MappingNode):
        children = [(k.value if isinstance(k, ScalarNode) else None, v) for k, v in node.value]
    elif isinstance(node, SequenceNode):
        children = [(None, v) for v in node.value]
    for key, child in children:
        rest = [p[1:] for p in paths if p and (p[0] == "*" or (key is not None and p[0] == key))]
        _keep_text(child, rest)


def _one_line(exc: yaml.YAMLError, text: str) -> str:
    """A YAML error as 'what (line L, column C)', without the multi-line source excerpt."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        return f"{exc.reason} (character #x{exc.character:04x}, line {line})"
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        what = "; ".join(str(p) for p in (exc.context, exc.problem) if p) or "syntax error"
        return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark else what
    return " ".join(str(exc).split())


def load_yaml(text: str, where: str, text_paths: Sequence[Path] = ()) -> Any:
    """One YAML document; ``text_paths`` name the fields whose plain scalars stay strings."""
    return load_yaml_with_lines(text, where, text_paths)[0]


def load_yaml_with_lines(text: str, where: str, text_paths: Sequence[Path] = ()) -> tuple[Any, list[int]]:
    """``load_yaml``, plus the 1-based line where each task item starts (the items of a top-level
    list, or of the list under ``tasks:``); empty when the document has no such list."""
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # checks the characters first (control characters are refused)
        node = loader.get_single_node()
        if node is None:
            return None, []
        _measure(node)
        _keep_text(node, text_paths)
        return loader.construct_document(node), _item_lines(node)
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {_one_line(exc, text)}", where=where) from exc
    except RecursionError as exc:  # e.g. a very long chain of flow collections in one scalar key
        raise InputError(f"not valid YAML: nested deeper than {MAX_DEPTH} levels", where=where) from exc
    finally:
        if loader is not None:
            loader.dispose()


def _item_lines(root: Node) -> list[int]:
    items = root
    if isinstance(root, MappingNode):
        tasks = [v for k, v in root.value if isinstance(k, ScalarNode) and k.value == "tasks"]
        items = tasks[-1] if tasks else root  # the last "tasks" wins, as when constructing
    if not isinstance(items, SequenceNode):
        return []
    return [item.start_mark.line + 1 for item in items.value]


def json_item_lines(text: str) -> list[int]:
    """The 1-based line where each task item of a JSON document starts (a top-level array, or
    the array under ``"tasks"``); empty when there is none. Call it on text ``load_json`` accepted."""
    decoder = json.JSONDecoder()

    def skip(at: int) -> int:
        while at < len(text) and text[at] in " \t\r\n,:":
            at += 1
        return at

    def items(at: int) -> list[int]:  # ``at`` is just past "["
        starts = []
        at = skip(at)
        while at < len(text) and text[at] != "]":
            starts.append(text.count("\n", 0, at) + 1)
            at = skip(decoder.raw_decode(text, at)[1])
        return starts

    at = skip(0)
    if text.startswith("\ufeff", at):
        at = skip(at + 1)
    if text.startswith("[", at):
        return items(at + 1)
    if not text.startswith("{", at):
        return []
    found: list[int] = []
    at = skip(at + 1)
    while at < len(text) and text[at] != "}":
        key, at = decoder.raw_decode(text, at)
        at = skip(at)
        if key == "tasks" and text.startswith("[", at):
            found = items(at + 1)  # the last "tasks" wins, as in json.loads
        at = skip(decoder.raw_decode(text, at)[1])
    return found


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists/dicts deeper than ``limit`` (iterative: safe on any depth)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def load_json(text: str, where: str) -> Any:
    """One JSON value, or an error naming what is wrong (bad syntax, nesting too deep)."""
    try:
        value = json.loads(text)
    except RecursionError as exc:
        raise InputError(f"not valid JSON: nested deeper than {MAX_DEPTH} levels", where=where) from exc
    except ValueError as exc:
        raise InputError(f"not valid JSON: {exc}", where=where) from exc
    if depth_exceeds(value):
        raise InputError(f"not valid JSON: nested deeper than {MAX_DEPTH} levels", where=where)
    return value
