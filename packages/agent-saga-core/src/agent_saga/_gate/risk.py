"""Risk scoring: a hook that can only make the gate's decision stricter, and an offline scorer.

A scorer maps a call to a number in ``[0, 1]``. It reaches the gate only through
:class:`RiskRule` (or as :class:`EmbeddingRiskScorer`, which is one), a rule like any other: a
score at or above ``approve_at`` is ``RequireApproval``, at or above ``deny_at`` it is ``Deny``,
and anything that is not a finite number in ``[0, 1]`` (or an exception) is ``Deny``. The gate
folds it with every other rule by strictest-wins, so a flagged call still passes through every
rule and a scorer can never turn another rule's ``Deny`` or ``RequireApproval`` into a run.

:class:`EmbeddingRiskScorer` needs no dependency and no network: a call is turned into a bag of
features (the tool name's parts, argument names, words and character trigrams of string values,
the order of magnitude of each number under its argument name), hashed into a sparse unit
vector, and compared by cosine similarity with labelled calls. The score weighs the similarity to
the nearest dangerous call against that to the nearest benign one. ``embed=`` may
supply a real sentence-embedding function instead (any ``str -> sequence of floats``).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .decisions import ALLOW, Decision, Deny, RequireApproval, ToolCall
from .rules import describe_scope, tool_scope

DEFAULT_THRESHOLD = 0.5
_DIMENSIONS = 1 << 14
_WORD = re.compile(r"[a-z0-9]+|[^a-z0-9\s]")
_MAX_FEATURE_TEXT = 4096
_MAX_LEAVES = 256

Vector = dict[int, float]


@runtime_checkable
class RiskScorer(Protocol):
    """Scores a call before it runs: 0 is harmless, 1 is certainly dangerous."""

    @property
    def name(self) -> str: ...

    def score(self, call: ToolCall) -> float: ...


class RiskRule:
    """A scorer as a gate rule: it can refuse or ask for approval, never allow past a rule.

    Args:
        scorer: a :class:`RiskScorer` or a plain ``call -> float`` function.
        approve_at: scores at or above this need a human approval.
        deny_at: scores at or above this are refused outright (``None``: never).
        tools: the tools scored (``None``: every tool).
    """

    kind = "scorer"

    def __init__(
        self,
        scorer: RiskScorer | Callable[[ToolCall], float],
        *,
        approve_at: float = DEFAULT_THRESHOLD,
        deny_at: float | None = None,
        tools: Iterable[str] | str | None = None,
        name: str | None = None,
    ) -> None:
        _check_threshold("approve_at", approve_at)
        if deny_at is not None:
            _check_threshold("deny_at", deny_at)
        self.scorer = scorer
        # Resolved once: a Protocol isinstance check per call would cost more than most rules.
        self._score_fn: Callable[[ToolCall], float] = (
            scorer.score if isinstance(scorer, RiskScorer) else scorer
        )
        self.approve_at, self.deny_at = approve_at, deny_at
        self.tools = tool_scope(tools)
        default = getattr(scorer, "name", None) or getattr(scorer, "__name__", "risk")
        self.name = name or str(default)

    def score(self, call: ToolCall) -> float:
        return self._score_fn(call)

    def evaluate(self, call: ToolCall) -> Decision:
        if self.tools is not None and call.tool not in self.tools:
            return ALLOW
        return decide(self.name, self._score_fn(call), self.approve_at, self.deny_at)

    def describe(self) -> str:
        deny = f", refused at {self.deny_at:g}" if self.deny_at is not None else ""
        return (
            f"risk score {self.name}: approval at {self.approve_at:g}{deny} "
            f"on {describe_scope(self.tools)}"
        )


def _check_threshold(label: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{label} must be a number in [0, 1], got {value!r}")


def decide(name: str, score: object, approve_at: float, deny_at: float | None) -> Decision:
    """The decision for ``score``; a score that is not a finite number in [0, 1] refuses."""
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        return Deny(name, f"risk score {score!r} is not a number in [0, 1]")
    if deny_at is not None and score >= deny_at:
        return Deny(name, f"risk score {score:.2f} is at or above {deny_at:g}")
    if score >= approve_at:
        return RequireApproval(name, f"risk score {score:.2f} is at or above {approve_at:g}")
    return ALLOW


@dataclass(frozen=True)
class LabelledCall:
    """A call with its label (``dangerous`` or ``benign``), as shipped in the data set."""

    tool: str
    args: Mapping[str, Any]
    dangerous: bool
    note: str = ""


def load_labelled(lines: Iterable[str]) -> list[LabelledCall]:
    """Parse JSON lines ``{"tool", "args", "label": "dangerous"|"benign", "note"}``."""
    out: list[LabelledCall] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = json.loads(line)
        label = row.get("label")
        if label not in ("dangerous", "benign") or not isinstance(row.get("args"), dict):
            raise ValueError(f"line {number}: needs args (an object) and label dangerous|benign")
        out.append(LabelledCall(str(row["tool"]), row["args"], label == "dangerous", row["note"]))
    return out


def shipped_calls() -> list[LabelledCall]:
    """The labelled calls shipped with agent-saga (``agent_saga/_gate/data/risk_calls.jsonl``)."""
    from importlib import resources  # loads tempfile and more: only when the data is read

    text = resources.files("agent_saga._gate").joinpath("data/risk_calls.jsonl").read_text("utf-8")
    return load_labelled(text.splitlines())


def split_halves(calls: Sequence[LabelledCall]) -> tuple[list[LabelledCall], list[LabelledCall]]:
    """Train and held-out halves: every second call of each label, in file order."""
    train: list[LabelledCall] = []
    held_out: list[LabelledCall] = []
    seen = {True: 0, False: 0}
    for call in calls:
        (train if seen[call.dangerous] % 2 == 0 else held_out).append(call)
        seen[call.dangerous] += 1
    return train, held_out


def _leaves(value: object, path: str, out: list[tuple[str, object]], depth: int = 0) -> None:
    if len(out) >= _MAX_LEAVES or depth > 8:
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            _leaves(item, str(key), out, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _leaves(item, path, out, depth + 1)
    else:
        out.append((path, value))


def features(tool: str, args: Mapping[str, Any]) -> dict[str, float]:
    """The weighted features of a call (readable strings, before hashing)."""
    bag: dict[str, float] = {}

    def add(feature: str, weight: float = 1.0) -> None:
        bag[feature] = bag.get(feature, 0.0) + weight

    for part in re.split(r"[._\-]", tool.lower()):
        add(f"t:{part}", 2.0)
    leaves: list[tuple[str, object]] = []
    _leaves(args, "", leaves)
    for name, value in leaves:
        key = name.lower()
        add(f"k:{key}")
        if isinstance(value, bool):
            add(f"b:{key}={value}")
        elif isinstance(value, int | float):
            magnitude = math.floor(math.log10(abs(value))) if value else -9
            magnitude = max(-9, min(12, magnitude))
            sign = "-" if value < 0 else "+"
            add(f"n:{key}:{sign}{magnitude}", 3.0)
            add(f"n:{sign}{magnitude}")
        elif isinstance(value, str):
            for word in _WORD.findall(value.lower()[:_MAX_FEATURE_TEXT]):
                add(f"w:{word}")
                padded = f"^{word}$"
                for i in range(len(padded) - 2):
                    add(f"c:{padded[i : i + 3]}", 0.3)
    return bag


def hashed(bag: Mapping[str, float]) -> Vector:
    """``bag`` hashed into a sparse vector (CRC-32, so identical in every process)."""
    vector: Vector = {}
    for feature, weight in bag.items():
        index = zlib.crc32(feature.encode()) % _DIMENSIONS
        vector[index] = vector.get(index, 0.0) + weight
    return vector


def cosine(a: Vector, b: Vector) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(w * b.get(i, 0.0) for i, w in a.items())


def call_text(tool: str, args: Mapping[str, Any]) -> str:
    """A call as one line of text, for ``embed=`` backends."""
    return f"{tool} " + json.dumps(args, sort_keys=True, default=str)[:_MAX_FEATURE_TEXT]


class EmbeddingRiskScorer(RiskRule):
    """Scores calls by their similarity to labelled dangerous and benign calls (offline).

    Each feature is weighted by how well it separates the two labels in ``examples`` (``1 +
    |log-odds|``), so words shared by both (the tool's own name) count less than words that
    only dangerous calls have (``DROP``, a dose two orders of magnitude up). The score is
    ``d / (d + b)``, ``d`` and ``b`` being the best cosine similarity to a dangerous and to a
    benign example (just ``d`` when there are no benign examples).

    Args:
        examples: labelled calls; default: the set shipped with agent-saga.
        approve_at, deny_at: thresholds as in :class:`RiskRule` (default threshold 0.5).
        embed: optional ``text -> vector`` function (a sentence-embedding model) used instead
            of the built-in hashed features.
    """

    def __init__(
        self,
        examples: Iterable[LabelledCall] | None = None,
        *,
        approve_at: float = DEFAULT_THRESHOLD,
        deny_at: float | None = None,
        tools: Iterable[str] | str | None = None,
        embed: Callable[[str], Sequence[float]] | None = None,
        name: str = "risk_score",
    ) -> None:
        labelled = list(shipped_calls() if examples is None else examples)
        if not any(c.dangerous for c in labelled):
            raise ValueError("EmbeddingRiskScorer needs at least one dangerous example")
        self._embed = embed
        raw = [(self._raw(c.tool, c.args), c.dangerous) for c in labelled]
        self._weights = _separation_weights(raw) if embed is None else {}
        self._labels = [bad for _, bad in raw]
        self._postings: dict[int, list[tuple[int, float]]] = {}
        for number, (vector, _) in enumerate(raw):
            for index, weight in self._unit(vector).items():
                self._postings.setdefault(index, []).append((number, weight))
        super().__init__(self._score, approve_at=approve_at, deny_at=deny_at, tools=tools)
        self.name = name

    def _raw(self, tool: str, args: Mapping[str, Any]) -> Vector:
        if self._embed is not None:
            return dict(enumerate(float(v) for v in self._embed(call_text(tool, args))))
        return hashed(features(tool, args))

    def _unit(self, vector: Vector) -> Vector:
        weights = self._weights
        if weights:
            vector = {i: w * weights.get(i, 1.0) for i, w in vector.items()}
        norm = math.sqrt(sum(w * w for w in vector.values()))
        return {i: w / norm for i, w in vector.items() if w} if norm else {}

    def score_args(self, tool: str, args: Mapping[str, Any]) -> float:
        """The score of a call given as a tool name and its arguments."""
        dots = [0.0] * len(self._labels)  # cosine with every example, through the index
        postings = self._postings
        for index, weight in self._unit(self._raw(tool, args)).items():
            for number, other in postings.get(index, ()):
                dots[number] += weight * other
        bad = good = 0.0
        for dot, dangerous in zip(dots, self._labels, strict=True):
            if dangerous:
                bad = max(bad, dot)
            else:
                good = max(good, dot)
        if not any(not label for label in self._labels):
            return min(1.0, bad)
        return bad / (bad + good) if bad + good > 0 else 0.0

    def _score(self, call: ToolCall) -> float:
        return self.score_args(call.tool, call.args)

    def score(self, call: ToolCall) -> float:
        return self._score(call)

    def describe(self) -> str:
        backend = "embedding function" if self._embed is not None else "hashed features"
        return (
            f"{super().describe()}; {backend}, {sum(self._labels)} dangerous and "
            f"{len(self._labels) - sum(self._labels)} benign labelled calls"
        )


def _separation_weights(raw: list[tuple[Vector, bool]]) -> dict[int, float]:
    """Per feature: ``1 + |log-odds|`` of appearing in a dangerous vs a benign example."""
    counts: dict[int, list[int]] = {}
    for vector, bad in raw:
        for index in vector:
            counts.setdefault(index, [0, 0])[0 if bad else 1] += 1
    n_bad = sum(1 for _, bad in raw if bad)
    n_good = len(raw) - n_bad
    return {
        index: 1.0 + abs(math.log((b + 0.5) / (n_bad + 1)) - math.log((g + 0.5) / (n_good + 1)))
        for index, (b, g) in counts.items()
    }


__all__ = [
    "DEFAULT_THRESHOLD",
    "EmbeddingRiskScorer",
    "LabelledCall",
    "RiskRule",
    "RiskScorer",
    "call_text",
    "cosine",
    "decide",
    "features",
    "hashed",
    "load_labelled",
    "shipped_calls",
    "split_halves",
]
