"""One way to check every input that comes from outside: pydantic models.

The controller configuration, the inventory, the topology arguments and
every message on the agent channel are declared as models of `Strict`
(docs/design.md, "Validation"). Strict means:

- a boolean is never a number and 14.0 is not an integer;
- NaN and infinity are refused wherever a number is expected;
- unknown keys are refused, and a required key that is missing is named.

`check` turns pydantic's errors into one `ValidationError` naming the field
as a path (``routes[3].initcwnd``) and the problem in a short sentence.
`load_json` reads JSON from outside with a nesting limit, so a deeply
nested document is refused instead of exhausting the parser's stack.
"""

import json
import math
import re
from typing import Any, TypeVar

import pydantic
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict

#: The deepest nesting of JSON any input may have (the deepest real one is 4).
MAX_JSON_DEPTH = 32


class ValidationError(ValueError):
    """A field of an input is wrong.

    `field` is where (``routes[3].initcwnd``), `problem` what; ``str()``
    gives both, ready for a log line, an exit message or a reject message.
    """

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


class Strict(BaseModel):
    """Base of every input model: strict types, no unknown keys, finite numbers."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


Model = TypeVar("Model", bound=BaseModel)


def check(model: type[Model], data: Any, where: str = "") -> Model:
    """Validate data against a model; raise ValidationError naming the first bad field.

    where prefixes the field path (a file name, ``routes[2]``).
    """
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        raise ValidationError(_join(where, field_path(first["loc"])), _problem(first)) from None


def field_path(loc: tuple) -> str:
    """('routes', 3, 'initcwnd') -> 'routes[3].initcwnd'."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not str(part).startswith(("function-", "union[", "nullable[")):
            name = _shortened(str(part))
            path += f".{name}" if path else name
    return path


def _shortened(key: str, limit: int = 40) -> str:
    """A key as an error names it: on one line, and an outsider's 1 MiB key is not echoed whole."""
    key = key.encode("unicode_escape").decode("ascii")
    return key if len(key) <= limit else f"{key[:limit - 3]}..."


def _join(where: str, field: str) -> str:
    if not where:
        return field
    if not field or field.startswith("["):
        return where + field
    return f"{where}.{field}"


def int_range(low: int, high: int) -> AfterValidator:
    """Inclusive bounds of an integer, named in the error: ``Annotated[int, int_range(1, 256)]``."""

    def within(value: int) -> int:
        if not low <= value <= high:
            raise ValueError(f"{show(value)} is out of range {low}..{high}")
        return value

    return AfterValidator(within)


_PHRASES = {
    "missing": "missing",
    "extra_forbidden": "unknown key",
    "int_type": "{value} is not an integer",
    "float_type": "{value} is not a number",
    "finite_number": "{value} is not a finite number",
    "string_type": "{value} is not a string",
    "bool_type": "{value} is not true or false",
    "list_type": "{value} is not a list",
    "tuple_type": "{value} is not a list",
    "dict_type": "{value} is not an object",
    "model_type": "{value} is not an object",
    "model_attributes_type": "{value} is not an object",
    "none_required": "{value} must be null",
    "greater_than_equal": "{value} is below the minimum {ge}",
    "greater_than": "{value} must be above {gt}",
    "less_than_equal": "{value} is above the maximum {le}",
    "less_than": "{value} must be below {lt}",
    "string_too_long": "longer than {max_length} characters",
    "string_too_short": "shorter than {min_length} characters",
    "too_long": "more than {max_length} items",
    "too_short": "fewer than {min_length} items",
    "literal_error": "{value} is not one of {expected}",
    "string_pattern_mismatch": "{value} does not match {pattern}",
}


def _problem(error: Any) -> str:
    kind = error["type"]
    context = dict(error.get("ctx") or {})
    if kind in ("value_error", "assertion_error") and "error" in context:
        return str(context["error"])
    if kind == "union_tag_invalid" or kind not in _PHRASES:
        return str(error["msg"])
    return _PHRASES[kind].format(value=show(error.get("input")), **{k: _plain(v) for k, v in context.items()})


def _plain(value: Any) -> str:
    """A bound as people write it: 0, not 0.0."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def show(value: Any) -> str:
    """A value as an error message quotes it: JSON where possible, cut to 60 characters."""
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


class JSONError(ValueError):
    """Bytes that are not one acceptable JSON document."""


def load_json(body: bytes, where: str = "input", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON from outside: UTF-8, no NaN or infinity, nesting at most max_depth.

    The depth is counted on the raw text before parsing, so a document of a
    thousand brackets never reaches the recursive parser.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JSONError(f"{where}: not UTF-8 ({error.reason} at byte {error.start})") from None
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JSONError(f"{where}: nested {depth} levels deep, more than the limit of {max_depth}")
    infinite: list[str] = []  # the spellings of the non-finite numbers met, if any

    def number(spelling: str) -> float:
        value = float(spelling)
        if not math.isfinite(value):
            infinite.append(spelling)
        return value

    try:
        document = json.loads(text, parse_constant=number, parse_float=number, object_pairs_hook=_refuse_duplicates)
    except json.JSONDecodeError as error:
        raise JSONError(f"{where}: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}") from None
    except ValueError as error:
        raise JSONError(f"{where}: invalid JSON ({error})") from None
    if infinite:
        spelling = infinite[0]
        what = (f"{spelling} is not valid JSON" if spelling in ("NaN", "Infinity", "-Infinity")
                else f"{_shortened(spelling)} is beyond the largest number")
        raise JSONError(f"{where}: {_first_non_finite(document) or 'the document'}: {what} (numbers must be finite)")
    return document


def _first_non_finite(document: Any, path: str = "") -> str | None:
    """The path (``routes[3].initcwnd``) of the first NaN or infinity in a parsed document, or None."""
    if isinstance(document, float):
        return None if math.isfinite(document) else path
    items: Any = ()
    if isinstance(document, dict):
        items = ((f"{path}.{_shortened(str(key))}" if path else _shortened(str(key)), value)
                 for key, value in document.items())
    elif isinstance(document, list):
        items = ((f"{path}[{i}]", value) for i, value in enumerate(document))
    for where, value in items:
        found = _first_non_finite(value, where)
        if found is not None:
            return found
    return None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting of a JSON text, brackets inside strings not counted."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


#: The most values a YAML document may hold once its aliases are expanded: far above the largest
#: inventory (a k=16 fat-tree is about 30 000), far below what a "billion laughs" of aliases makes.
MAX_YAML_NODES = 1_000_000


def load_yaml(text: str, where: str = "input", max_depth: int = MAX_JSON_DEPTH,
              max_nodes: int = MAX_YAML_NODES) -> Any:
    """Parse YAML from outside (safe loader), nesting at most max_depth, at most max_nodes values
    with its aliases expanded, and no mapping key given twice.

    Depth and size are counted on the parser's events, which are produced
    without recursion, before the recursive composer builds the document: an
    alias bomb is refused after reading its few lines, never expanded.
    """
    try:
        _check_events(yaml.parse(text, Loader=yaml.SafeLoader), where, max_depth, max_nodes)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except _DuplicateKey as duplicate:
        raise ValidationError(where, str(duplicate)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ValidationError(where, f"YAML syntax error{at}: {problem}") from None


def _check_events(events: Any, where: str, max_depth: int, max_nodes: int) -> None:
    """Refuse a YAML event stream nested deeper than max_depth, or holding more than max_nodes
    values once every alias is counted as the node it names (an alias of an alias multiplies)."""
    sizes: dict[str, int] = {}  # anchor -> values in its node, expanded
    open_nodes: list[list[Any]] = [[None, 0]]  # [anchor, values so far] of the document and each open collection
    for event in events:
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_nodes.append([event.anchor, 1])
            if len(open_nodes) > max_depth + 1:
                raise ValidationError(where, f"nested more than {max_depth} levels deep")
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, size = open_nodes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, size = None, sizes.get(event.anchor or "", 1)
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        open_nodes[-1][1] += size
        if open_nodes[-1][1] > max_nodes:
            raise ValidationError(where, f"line {event.start_mark.line + 1}: more than {max_nodes} values once "
                                         "its aliases are expanded; refused unexpanded")


class _DuplicateKey(Exception):
    """A mapping gives a key twice; the message names the key and both lines."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that gives a key twice (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping, once every key of it is known to be given once."""
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(f"line {line}: key {show(key)} is given twice (first at line {seen[key]})")
                seen[key] = line
            except TypeError:
                continue  # an unhashable key: the base loader refuses it with its position
        return super().construct_mapping(node, deep)


def load_yaml_file(path: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Read and parse the YAML file at path (load_yaml); a missing file is a ValidationError
    naming it. Other OSErrors (the file cannot be read) propagate."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ValidationError(path, "no such file") from None
    return load_yaml(text, path, max_depth)


def _refuse_duplicates(pairs: list) -> dict:
    """A JSON object whose keys are unique: a repeated key is refused, not silently overwritten."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {show(key)}")
            seen.add(key)
    return document
