"""A key with no certificate is served the setting of its nearest certified neighbour, screened first.

Nearest (space.distance): the certified keys of the same kernel with the same dtype, flag and label
fields (the same family, dtype and layout), ranked by the octaves between their size fields'
classes, each times the field's weight (the Tunable's `weights`), summed over the fields; at equal distance the neighbour above wins (its tile was chosen for more
work, and a smaller launch of a bandwidth-bound kernel loses less to a larger tile than the
reverse loses to a smaller one), then the key's text (a fixed order, so every run picks alike).

Before it is served, the neighbour's setting is pruned as a sweep of this key would prune it
(device limits, the kernel's constraint, `fits` at the key's representative) and screened once
against the float64 oracle on this key's own smallest launch (keys.smallest: the smallest sizes
in their classes that Triton specializes as it does the launch's own, so the screen's compile is
the one the launch loads), comparing at most
`autotune.neighbour_screen_max_bytes` of output rows. A setting that fails is never served: the
next neighbour is tried. Nothing is timed. A verdict is screened once per machine: it is kept in the
local cache and read by later processes while all that decides it is unchanged (verdicts.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nbx.core.dtypes import DType
from nbx.core.errors import LaunchKeyError, ScreenRefusal

from . import keys, screen, space, verdicts
from .store import Entry

MAX_BYTES_FACT = "autotune.neighbour_screen_max_bytes"


@dataclass
class Choice:
    """The neighbour served (None: no neighbour passed), and every one tried before it, with why not."""

    key: str | None = None
    entry: Entry | None = None
    deviation: float | None = None
    refused: list = field(default_factory=list)   # (neighbour key, reason)


def parsed(tunable, certified: Mapping[str, Entry], facts) -> list[tuple[keys.LaunchKey, str, Entry]]:
    """The certified keys parsed once (a tuner keeps them: ranking every uncertified key parses them all)."""
    found = []
    for text, entry in certified.items():
        try:
            found.append((keys.parse(tunable.name, tunable.key, text, facts), text, entry))
        except LaunchKeyError:
            continue  # classed on another ladder: the store refuses such a file whole
    return found


def ranked(tunable, key: keys.LaunchKey, certified: Mapping[str, Entry], facts,
           parsed_keys: list | None = None) -> list[tuple[str, Entry]]:
    """The certified neighbours of key, nearest first (parsed_keys: parsed(certified), where kept)."""
    found = []
    for other, text, entry in parsed_keys if parsed_keys is not None else parsed(tunable, certified, facts):
        apart = space.distance(tunable.key, key, other, tunable.weights)
        if apart is not None and other != key:
            found.append((apart[0], -apart[1], text, entry))
    found.sort(key=lambda item: item[:3])
    return [(text, entry) for _, _, text, entry in found]


class Screener:
    """Screens settings on one key's small launch: a kept verdict where one holds (verdicts.py), else the
    screen, whose workload is made at the first setting that needs it and whose verdict is kept.

    The instance screened: the launch's own sizes (keys.launched: key.observed) where the tunable declares
    screen_at_launch and the launch reads at most autotune.neighbour_screen_max_bytes, so that the screen
    compiles the very specialization the launch then loads; else the key's smallest launch of the
    launch's own kinds of sizes (keys.smallest's like)."""

    def __init__(self, tunable, key: keys.LaunchKey, facts, device, kept: verdicts.VerdictCache | None = None,
                 where: dict | None = None):
        self.tunable, self.key, self.facts, self.device = tunable, key, facts, device
        self.kept = kept
        self.where = where if where is not None or kept is None else verdicts.context(facts, MAX_BYTES_FACT)
        self.instance, self.text = self._instance()
        self.work = None

    def _instance(self) -> tuple[dict, str]:
        """(the instance screened, the text its verdict is kept under): a pure function of the key and its
        observed sizes, so a key parsed from a keys file (`nbx warmup --keys`) keeps the verdict its run reads."""
        tunable, key = self.tunable, self.key
        at = tunable.screen_at_launch
        own = keys.launched(key, tunable.key_fields) if at is not None else None
        if own is not None:
            itemsize = max((v.itemsize for v in own.values() if isinstance(v, DType)), default=8)
            if own[at] * itemsize <= self.facts.value(MAX_BYTES_FACT):
                sizes = ",".join(f"{name}={v}" for name, v in own.items() if not isinstance(v, (DType, bool)))
                return own, f"{key} at {sizes}"
        # the instance takes the observed launch's specializations (keys.smallest's like): kept per kind
        laddered = {name for name, kind in tunable.key_fields if kind in keys.LADDERS}
        kinds = ",".join(f"{name}:{keys.specialization(v)}" for name, v in sorted(key.observed.items())
                         if name in laddered)
        return (keys.smallest(key, tunable.key_fields, self.facts, like=key.observed),
                f"{key} like {kinds}" if kinds else str(key))

    def verdict(self, setting) -> screen.Verdict:
        if self.kept is not None:
            found = self.kept.get(self.tunable.name, self.text, setting, self.where)
            if found is not None:
                return found
        if self.work is None:
            self.work = self.tunable.workload(self.instance, self.device)
        found = screen.run(self.work, [dict(setting)], self.facts, MAX_BYTES_FACT).verdicts[0]
        if self.kept is not None:
            self.kept.put(self.tunable.name, self.text, found, self.where)
        return found


def choose(tunable, key: keys.LaunchKey, certified: Mapping[str, Entry], facts, device,
           kept: verdicts.VerdictCache | None = None, where: dict | None = None,
           parsed_keys: list | None = None) -> tuple[Choice, Screener]:
    """The nearest neighbour whose setting passes this key's screen, and the screener that judged it (its
    verdicts kept in `kept` where given)."""
    choice, failed = Choice(), []
    screener = Screener(tunable, key, facts, device, kept, where)
    try:
        top = keys.representative(key, tunable.key, facts)
    except LaunchKeyError:
        top = None  # an unbounded class without an observed size: `fits` is not asked
    for text, entry in ranked(tunable, key, certified, facts, parsed_keys):
        setting = dict(entry.setting)
        reason = tunable.refusal(setting, facts, top)
        if reason is None and setting in failed:
            reason = "the same setting failed this key's screen already"
        if reason is None:
            verdict = screener.verdict(setting)
            if verdict.passed:
                choice.key, choice.entry, choice.deviation = text, entry, verdict.deviation
                return choice, screener
            failed.append(setting)
            reason = f"failed this key's screen: {verdict.reason}"
        choice.refused.append((text, reason))
    return choice, screener


def default_checked(tunable, key: keys.LaunchKey, facts, screener: Screener) -> Entry:
    """The device file's tile for a key no neighbour serves, screened alike; refused by name if it fails."""
    setting = tunable.default(facts)
    verdict = screener.verdict(setting)
    if not verdict.passed:
        raise ScreenRefusal(f"kernel {tunable.name!r} key {str(key)!r}: no certified neighbour passed its screen "
                            f"and the device file's tile {setting} fails it too ({verdict.reason}); certify the "
                            f"key (nbx autotune certify) or sweep it (nbx autotune sweep)")
    return Entry(setting, {})
