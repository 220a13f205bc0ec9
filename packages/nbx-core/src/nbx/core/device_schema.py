"""Validation of device fact files against device_schema.yml, and the Fact record every lookup returns.

A file is checked whole when it is read: an unknown key, a bare value without provenance, a value of
the wrong type or out of range, an integer tolerance that is not exactly 0 - each is refused with
the file and the dotted key. Facts come back flattened ({"memory.max_shared_memory_per_block": Fact})
with their values frozen (tuples and read-only mappings), so no caller can edit a cached fact.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType

import yaml

from . import dtypes
from .errors import FileFormatError

# libyaml's parser under PyYAML's safe constructor: the same documents as yaml.safe_load, about ten
# times faster; every process reads the whole catalogue (28 files, about 1 s of a first run's
# start with the pure-Python parser, issue 16). PyYAML's wheels ship it; without it, the Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str):
    """yaml.safe_load(text), through libyaml where PyYAML has it."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)

SCHEMA_PATH = Path(__file__).with_name("device_schema.yml")
VENDOR_KEYS = {"schema", "vendor", "name", "family", "architecture", "targets", "facts"}
VENDOR_REQUIRED = VENDOR_KEYS - {"family"}
APPLICATION_KEYS = {"schema", "application", "targets", "facts"}
_KEY_PART = re.compile(r"[A-Za-z0-9_]+")
_TARGET = re.compile(r"[a-z0-9][a-z0-9_.:+-]*")
_MEASURED = re.compile(r"[^,]+,\s*\d{4}-\d{2}-\d{2},\s*\S.*")


@dataclass(frozen=True)
class Fact:
    """One fact: its dotted key, its value, where the value comes from, and the file stating it."""

    key: str
    value: object
    kind: str        # source | measured | derived | chosen
    text: str
    file: Path

    @property
    def provenance(self) -> str:
        return f"{self.kind}: {self.text}"


@cache
def schema() -> dict:
    return parse_yaml(SCHEMA_PATH.read_text())


@cache
def _flat_schema() -> tuple[dict, frozenset]:
    """(dotted key -> spec, the set of dotted group names) of the schema's fact tree."""
    specs, groups = {}, set()

    def walk(node, prefix):
        for name, child in node.items():
            key = f"{prefix}.{name}" if prefix else name
            if "type" in child:
                specs[key] = child
            else:
                groups.add(key)
                walk(child, key)

    walk(schema()["facts"], "")
    return specs, frozenset(groups)


def spec_of(key: str) -> dict | None:
    return _flat_schema()[0].get(key)


def schema_keys() -> list[str]:
    return sorted(_flat_schema()[0])


def required_keys(vendor: str) -> list[str]:
    return sorted(k for k, spec in _flat_schema()[0].items() if vendor in spec.get("required", ()))


def load_yaml(path: Path) -> dict:
    try:
        data = parse_yaml(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise FileFormatError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise FileFormatError(f"{path}: a device file is a mapping with `schema`, `targets` and `facts`")
    return data


def _fail(path, where, problem):
    raise FileFormatError(f"{path}: {where}: {problem}")


def _check_top(data: dict, path: Path, allowed: set, required: set) -> None:
    unknown = sorted(set(map(str, data)) - allowed)
    if unknown:
        _fail(path, ", ".join(unknown), f"unknown top-level key(s); a file has {sorted(allowed)}")
    missing = sorted(required - set(data))
    if missing:
        _fail(path, ", ".join(missing), "missing top-level key(s)")
    if data["schema"] != schema()["schema_version"]:
        _fail(path, "schema", f"is {data['schema']!r}; this nbx reads schema {schema()['schema_version']}")
    targets = data["targets"]
    if not isinstance(targets, list) or not targets:
        _fail(path, "targets", "a non-empty list of target prefixes")
    for prefix in targets:
        if not isinstance(prefix, str) or not _TARGET.fullmatch(prefix):
            _fail(path, "targets", f"{prefix!r} is not a target prefix (lowercase, e.g. 'sm_90', 'gfx942', "
                                   f"'apple-m4-pro')")
    if len(set(targets)) != len(targets):
        _fail(path, "targets", "a prefix is listed twice")
    if not isinstance(data["facts"], dict):
        _fail(path, "facts", "a mapping of fact groups")


def validate_vendor_file(data: dict, path: Path, vendor: str) -> dict[str, Fact]:
    """The facts of a vendor file, flattened; the identity keys are checked against `vendor`/the stem."""
    _check_top(data, path, VENDOR_KEYS, VENDOR_REQUIRED)
    if data["vendor"] != vendor:
        _fail(path, "vendor", f"says {data['vendor']!r} but the file is in the {vendor!r} folder")
    if data["name"] != path.stem:
        _fail(path, "name", f"says {data['name']!r}; a file's name is its stem, {path.stem!r}")
    family = data.get("family")
    if family is not None and (not isinstance(family, str) or family == path.stem):
        _fail(path, "family", "names the family file (another stem in the same folder)")
    if not isinstance(data["architecture"], str) or not data["architecture"]:
        _fail(path, "architecture", "a human name such as 'Hopper (compute capability 9.0)'")
    out: dict[str, Fact] = {}
    _walk(data["facts"], "", path, True, out)
    return out


def validate_application_file(data: dict, path: Path) -> dict[str, Fact]:
    """The facts of an application file; its own keys are free, the schema's keys must match their spec."""
    _check_top(data, path, APPLICATION_KEYS, APPLICATION_KEYS)
    if not isinstance(data["application"], str) or not data["application"]:
        _fail(path, "application", "the application's name")
    out: dict[str, Fact] = {}
    _walk(data["facts"], "", path, False, out)
    return out


def _walk(node: dict, prefix: str, path: Path, strict: bool, out: dict) -> None:
    specs, groups = _flat_schema()
    for name, child in node.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if not isinstance(name, str) or not _KEY_PART.fullmatch(name):
            _fail(path, key, "a key part is letters, digits and underscores")
        if isinstance(child, dict) and "value" in child:
            fact = _fact(key, child, path)
            spec = specs.get(key)
            if spec is not None:
                _check_value(spec, fact.value, key, path)
            elif key in groups:
                _fail(path, key, "is a group of facts in the schema, not a fact")
            elif strict:
                _fail(path, key, "is not a fact of the schema (nbx/core/device_schema.yml); a typo, or a "
                                 "fact that needs a schema entry first")
            out[key] = Fact(key, _freeze(fact.value), fact.kind, fact.text, path)
        elif isinstance(child, dict):
            if key in specs:
                _fail(path, key, "is a fact of the schema, stated whole as {value: ..., "
                                 "source|measured|derived|chosen: ...}")
            if strict and key not in groups:
                _fail(path, key, "is not a group of the schema (nbx/core/device_schema.yml)")
            _walk(child, key, path, strict, out)
        else:
            _fail(path, key, "a bare value; write {value: ..., source|measured|derived|chosen: \"...\"}: "
                             "every fact says where it comes from")


def _fact(key: str, node: dict, path: Path) -> Fact:
    kinds = schema()["provenance"]
    extra = sorted(set(node) - {"value"} - set(kinds))
    if extra:
        _fail(path, key, f"unknown key(s) {extra} beside value; provenance is one of {kinds}")
    stated = [k for k in kinds if k in node]
    if len(stated) != 1:
        _fail(path, key, f"needs exactly one provenance ({' | '.join(kinds)}), found {stated or 'none'}")
    kind = stated[0]
    text = node[kind]
    if not isinstance(text, str) or not text.strip():
        _fail(path, key, f"its {kind} must be a non-empty text")
    if kind == "measured" and not _MEASURED.fullmatch(text.strip()):
        _fail(path, key, f"measured is \"<device>, <YYYY-MM-DD>, <tool>\", got {text!r}")
    if node["value"] is None:
        _fail(path, key, "a value of null; a fact that is not known is left out of the file")
    return Fact(key, node["value"], kind, text.strip(), path)


def _check_value(spec: dict, value, where: str, path: Path) -> None:
    kind = spec["type"]
    if kind in ("int", "number"):
        ok = isinstance(value, int) if kind == "int" else isinstance(value, (int, float))
        if not ok or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
            _fail(path, where, f"must be {'an integer' if kind == 'int' else 'a finite number'}, got {value!r}")
        if "min" in spec and value < spec["min"]:
            _fail(path, where, f"{value!r} is below its minimum {spec['min']}")
        if "max" in spec and value > spec["max"]:
            _fail(path, where, f"{value!r} is above its maximum {spec['max']}")
    elif kind == "str":
        if not isinstance(value, str) or not value:
            _fail(path, where, f"must be a non-empty text, got {value!r}")
    elif kind == "bool":
        if not isinstance(value, bool):
            _fail(path, where, f"must be true or false, got {value!r}")
    elif kind == "list":
        if not isinstance(value, list) or len(value) < spec.get("min_items", 0):
            _fail(path, where, f"must be a list of at least {spec.get('min_items', 0)} item(s)")
        for i, item in enumerate(value):
            _check_value(spec["items"], item, f"{where}[{i}]", path)
    elif kind == "record":
        _check_record(spec, value, where, path)
    elif kind == "dtype_map":
        _check_dtype_map(spec, value, where, path)
    elif kind == "ladder":
        _check_ladder(value, where, path)
    else:  # a schema bug, not a file's
        raise FileFormatError(f"{SCHEMA_PATH}: {where}: unknown type {kind!r}")


def _check_record(spec: dict, value, where: str, path: Path) -> None:
    if not isinstance(value, dict):
        _fail(path, where, f"must be a mapping with {sorted(spec['fields'])}")
    unknown = sorted(set(value) - set(spec["fields"]))
    if unknown:
        _fail(path, where, f"unknown field(s) {unknown}; fields are {sorted(spec['fields'])}")
    missing = sorted(set(spec["fields"]) - set(value) - set(spec.get("optional", ())))
    if missing:
        _fail(path, where, f"missing field(s) {missing}")
    for name, sub in value.items():
        _check_value(spec["fields"][name], sub, f"{where}.{name}", path)


def _check_dtype_map(spec: dict, value, where: str, path: Path) -> None:
    if not isinstance(value, dict):
        _fail(path, where, "must be a mapping from dtype name to value")
    names = set(dtypes.TABLE)
    unknown = sorted(set(value) - names)
    if unknown:
        _fail(path, where, f"{unknown} are not dtypes of nbx's table")
    missing = sorted(names - set(value))
    if missing:
        _fail(path, where, f"states no value for {missing}: every dtype of the table needs one")
    exact = set(spec.get("exact_zero_for", ()))
    for name, sub in value.items():
        _check_value(spec["values"], sub, f"{where}.{name}", path)
        if dtypes.TABLE[name].kind in exact and sub != 0:
            _fail(path, where + f".{name}", f"is {sub!r}; a {dtypes.TABLE[name].kind} result is compared "
                                            f"exactly, so its tolerance is 0")


def _check_ladder(value, where: str, path: Path) -> None:
    if not isinstance(value, list) or not value:
        _fail(path, where, "a ladder is a list of {up_to: int | null, step: int} rows")
    low = 0
    for i, row in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(row, dict) or set(row) != {"up_to", "step"}:
            _fail(path, at, "a ladder row is {up_to: int | null, step: int}")
        up_to, step = row["up_to"], row["step"]
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            _fail(path, at, f"step must be a positive integer, got {step!r}")
        last = i == len(value) - 1
        if up_to is None:
            if not last:
                _fail(path, at, "only the last row is unbounded (up_to: null)")
            continue
        if not isinstance(up_to, int) or isinstance(up_to, bool) or up_to <= low:
            _fail(path, at, f"up_to must be an integer above {low}, got {up_to!r}")
        if up_to % step:
            _fail(path, at, f"up_to {up_to} is not a multiple of step {step}")
        if last:
            _fail(path, at, "the last row is unbounded (up_to: null), so every size has a class")
        low = up_to


def _freeze(value):
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value
