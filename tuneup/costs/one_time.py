"""What a probe pays beyond its timed steps, as the worker really pays it.

One model for every price of a probe's one-time costs (the GPU twin, the
`sim` trainer, the presets' recorded costs), written from what the worker
does (worker/serve.py, worker/phases.py), not from what it would be nice
for it to do:

* **A process start**, fresh processes only (``spawn``: the interpreter,
  torch, CUDA's context, the set-up built); a warm worker pays its set-up
  (``setup``: model, optimizer, loader and its workers).
* **The first step, by what is new to the process** (`FirstUse`):
  - a *conv key* (precision x TF32 math x memory layout x batch x crop x the
    model's shape) it has not run: with cuDNN's benchmark mode every new key
    tries its algorithms again (the first H200 run's trace: the GPU 87-97%
    busy through the baseline's 29 s first step, memory swinging 4-10 GB);
  - a *compile*: cold where no process on the machine compiled that graph
    (Inductor's disk caches are empty for it), *cached* otherwise: the worker
    resets dynamo between probes (release_probe_state), so a later probe
    traces again and finds the FX-graph and AOTAutograd caches on disk; a
    new batch is a new graph, compiled cold;
  - a *script*: every probe scripts afresh (forget_torchscript);
  - a *capture*: every probe with CUDA graphs captures its own.
* **A warm-up until steady**, bounded in time: a share of warm-ups never
  settle (a loader-bound step wanders) and run to the cap (`ProbeCosts.unsettled`).
* **A failed probe** costs its start and its first step until it failed; the
  next probe starts a fresh process (the runner ends the one that failed).

Every figure is a `Cost`: the likely value, a low and a high one, where it
came from, whether a run measured it, and the measurement that would settle
it. A prediction taken at `HIGH` takes every unsettled figure at its
pessimistic end.

Pure: values in, values out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

End = Literal["low", "likely", "high"]
ENDS: tuple[End, ...] = ("low", "likely", "high")


@dataclass(frozen=True)
class Cost:
    """One figure of the model, in seconds (or a share), with its range and its source.

    Attributes:
        likely, low, high: the value taken at each end (low <= likely <= high).
        source: where it came from (a file and field, or the assumption's reason).
        measured: a run measured it (its range is what the runs spread over).
        settle: the measurement that would settle it (empty once measured).
    """

    likely: float
    low: float
    high: float
    source: str
    measured: bool = False
    settle: str = ""

    @classmethod
    def assumed(
        cls,
        likely: float,
        *,
        low: float | None = None,
        high: float | None = None,
        source: str,
        settle: str,
    ) -> Cost:
        low = likely if low is None else low
        high = likely if high is None else high
        return cls(likely, min(low, likely), max(high, likely), source, False, settle)

    @classmethod
    def of(cls, values: Sequence[float], source: str) -> Cost:
        """Measured: the median of what runs gave, spread over their range."""
        if not values:
            raise ValueError(f"no measurement for {source}")
        return cls(statistics.median(values), min(values), max(values), source, True, "")

    def at(self, end: End) -> float:
        return {"low": self.low, "likely": self.likely, "high": self.high}[end]

    def scaled(self, factor: float, why: str = "") -> Cost:
        return Cost(
            self.likely * factor,
            self.low * factor,
            self.high * factor,
            f"{self.source}{'; ' + why if why else ''}",
            self.measured,
            self.settle,
        )

    def to_dict(self) -> dict[str, Any]:
        said: dict[str, Any] = {
            "likely": round(self.likely, 3),
            "low": round(self.low, 3),
            "high": round(self.high, 3),
            "source": self.source,
            "measured": self.measured,
        }
        if self.settle:
            said["settled_by"] = self.settle
        return said


def crop(knobs: Mapping[str, Any]) -> tuple[Any, ...]:
    box = knobs.get("box_size")
    return tuple(box) if isinstance(box, (list, tuple)) else (box,)


def model_shape(knobs: Mapping[str, Any]) -> tuple[Any, ...]:
    return (knobs.get("levels"), knobs.get("width"), knobs.get("data_size"))


def conv_key(knobs: Mapping[str, Any]) -> tuple[Any, ...]:
    """What cuDNN plans (and a CPU's kernels are picked) for: precision, TF32 math, layout,
    batch (global, or per rank where that is set), crop, the model's shape."""
    return (
        "conv",
        knobs.get("amp_mode"),
        knobs.get("tf32"),
        knobs.get("channels_last"),
        knobs.get("global_batch_size"),
        crop(knobs),
        model_shape(knobs),
        *((knobs["local_batch_size"],) if knobs.get("local_batch_size") else ()),
    )


def graph_key(knobs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What torch.compile's graph of the model (and its disk-cache entry) depends on: the
    mode and the conv key's precision, layout and shapes; not the optimizer or a CUDA graph
    around the step (tuneup compiles the model alone). None: no compile."""
    if knobs.get("jit") != "compile":
        return None
    return ("graph", knobs.get("compile_mode"), *conv_key(knobs)[1:])


def pays_every_probe(knobs: Mapping[str, Any]) -> bool:
    """Whether every probe of this configuration pays first steps again: it compiles its
    model (the worker resets dynamo between probes: from the disk caches, after the first),
    scripts it, or captures a CUDA graph (`ProcessHistory.probe`)."""
    return knobs.get("jit") in ("compile", "script") or bool(knobs.get("cuda_graphs"))


def kernels_new(knobs: Mapping[str, Any], seen: set[tuple[Any, ...]]) -> bool:
    """Whether a probe of `knobs` pays first steps in a process that has run the conv keys
    `seen`: its conv key is new there, or it pays them in every probe."""
    return conv_key(knobs) not in seen or pays_every_probe(knobs)


def kernels_change(values: Mapping[str, Any]) -> bool:
    """Whether a candidate's values change what its first steps pay for in a warm process:
    a knob of the conv key (a cuDNN search), a compile or a script, a captured graph. Its
    optimizer, loader or workers do not (their first steps are steady)."""
    return conv_key(values) != conv_key({}) or pays_every_probe(values)


@dataclass(frozen=True)
class FirstUse:
    """What a probe's first step pays for, new to its process.

    Attributes:
        fresh: it started its process.
        conv: its conv key is new to the process.
        compile: "cold" (no disk cache holds its graph), "cached" (one does), "" (no compile).
        script: it scripts its model (every such probe does).
        capture: it captures a CUDA graph (every such probe does).
    """

    fresh: bool
    conv: bool = False
    compile: str = ""
    script: bool = False
    capture: bool = False

    @property
    def new(self) -> bool:
        """Whether anything beyond steady steps is paid in its first step."""
        return self.fresh or self.conv or bool(self.compile) or self.script or self.capture


@dataclass
class ProcessHistory:
    """What a worker process (and the machine's compile caches) have seen, probe by probe.

    Attributes:
        compiled: graphs the machine's disk caches hold (they outlive processes).
        conv_keys: the conv keys the current process ran.
    """

    compiled: set[tuple[Any, ...]] = field(default_factory=set)
    conv_keys: set[tuple[Any, ...]] = field(default_factory=set)

    def probe(self, knobs: Mapping[str, Any], fresh: bool) -> FirstUse:
        """The next probe's first use of each part (a fresh process forgets its conv keys)."""
        if fresh:
            self.conv_keys = set()
        key = conv_key(knobs)
        conv = key not in self.conv_keys
        self.conv_keys.add(key)
        graph = graph_key(knobs)
        compiled = ""
        if graph is not None:
            compiled = "cached" if graph in self.compiled else "cold"
            self.compiled.add(graph)
        return FirstUse(
            fresh=fresh,
            conv=conv,
            compile=compiled,
            script=knobs.get("jit") == "script",
            capture=bool(knobs.get("cuda_graphs")),
        )

    def failed(self) -> None:
        """The runner ends a process after a failure: the next probe starts afresh."""
        self.conv_keys = set()


DEFAULT_BATCH_EXPONENT = Cost.assumed(
    0.5,
    low=0.0,
    high=1.0,
    source="an autotuning trial runs the step's convolutions at its batch: between no growth "
    "and linear growth with the batch",
    settle="the first step of one conv row at batch 64 and at 128 or 256 (a ladder journal)",
)


@dataclass(frozen=True)
class WorkerCosts:
    """The price list of a probe's one-time parts on one machine (the module docstring).

    Attributes:
        spawn: a fresh process's start, to its set-up built.
        setup: a probe's set-up in a warm worker.
        first_fresh: a fresh process's first step, by conv row (`row_of`); "baseline" is
            the fallback for a row not given.
        warm_first: what every probe's first step in a warm worker takes beyond a steady
            step (its loader's workers start, the allocator's first blocks).
        conv_new: what a warm worker pays for a conv key new to it, where it was measured;
            None: priced from the fresh first steps (`conv_warm`, `conv_floor`).
        conv_new_rows: the same by `conv_row`, at `base_batch`, where a run measured that
            row (a GPU's rows differ: 12.5 s for bf16 on an H200, 33 s for fp32).
        conv_warm: what a warm worker pays for a conv key new to it, as a share of that
            row's fresh first step above the floor.
        conv_floor: what every fresh first step pays whatever its key (lazily loaded
            kernels, the allocator's first blocks): not paid again in a warm worker.
        batch_exponent: a new batch's first step grows as (batch / base)^x over its row's.
        base_batch: the batch the rows were measured at.
        compile_cold, compile_cached: a torch.compile of a graph no cache holds, and of
            one the disk caches hold (after a release, or in a new process).
        script: scripting the model.
        capture: capturing a CUDA graph.
        unsettled: per phase, the share of warm-ups that never settle and run to the cap.
        warm_windows: per phase, the windows a settling warm-up takes after its first step.
        scale: what a warm probe really takes over what the model says of its parts (the
            release of the probe before, the runner's reading of its events).
    """

    spawn: Cost
    setup: Cost
    first_fresh: Mapping[str, Cost]
    warm_first: Cost
    conv_warm: Cost
    conv_floor: Cost
    compile_cold: Cost
    compile_cached: Cost
    script: Cost
    capture: Cost
    unsettled: Mapping[str, Cost] = field(default_factory=dict)
    warm_windows: Mapping[str, Cost] = field(default_factory=dict)
    scale: Cost = field(
        default_factory=lambda: Cost.assumed(
            1.0, source="the model's parts are the probe", settle="a gather's repeats"
        )
    )
    conv_new: Cost | None = None
    conv_new_rows: Mapping[str, Cost] = field(default_factory=dict)
    batch_exponent: Cost = field(default_factory=lambda: DEFAULT_BATCH_EXPONENT)
    base_batch: int = 64

    def fresh_first(self, row: str) -> Cost:
        found = self.first_fresh.get(row) or _between_parts(self.first_fresh, row)
        return found or self.first_fresh["baseline"]

    def first_step(
        self, use: FirstUse, knobs: Mapping[str, Any], end: End, first_batch_s: float = 0.0
    ) -> float:
        """The first step's cost beyond a steady step: its row's fresh first step in a fresh
        process; in a warm one, the warm first step (with `first_batch_s`, the wait for a
        CPU loader's first batch where the warm first step was not measured with it), and
        where its conv key is new to the process what cuDNN's search of it costs again (the
        row's fresh first step above the floor, or as measured)."""
        batch = float(knobs.get("global_batch_size") or self.base_batch)
        grow = (batch / self.base_batch) ** self.batch_exponent.at(end) if batch > 0 else 1.0
        row = conv_row(knobs)
        if use.fresh:
            return self.fresh_first(row).at(end) * grow
        warm = self.warm_first.at(end) + first_batch_s
        if not use.conv:
            return warm
        measured = self.conv_new_rows.get(row)
        if measured is not None:
            return max(warm, measured.at(end) * grow)
        if self.conv_new is not None:
            return max(warm, self.conv_new.at(end) * grow)
        fresh = self.fresh_first(row).at(end)
        floor = self.conv_floor.at(_opposite(end))  # a high price: little is the floor's
        return warm + max(0.0, fresh - floor) * self.conv_warm.at(end) * grow

    def one_time(
        self, use: FirstUse, knobs: Mapping[str, Any], end: End, first_batch_s: float = 0.0
    ) -> dict[str, float]:
        """The probe's one-time costs by part, as the worker's result names them."""
        start = self.spawn if use.fresh else self.setup
        parts = {("spawn" if use.fresh else "setup"): start.at(end)}
        first = self.first_step(use, knobs, end, first_batch_s)
        if first > 0:
            parts["first_steps"] = first
        if use.compile:
            cold = use.compile == "cold"
            parts["compile"] = (self.compile_cold if cold else self.compile_cached).at(end)
        if use.script:
            parts["compile"] = parts.get("compile", 0.0) + self.script.at(end)
        if use.capture:
            parts["graph_capture"] = self.capture.at(end)
        return parts

    def failed(self, use: FirstUse, knobs: Mapping[str, Any], end: End) -> dict[str, float]:
        """What a probe that failed in its first step cost: its start and that step (an
        out-of-memory or an unsupported knob shows there, after the set-up)."""
        start = (self.spawn if use.fresh else self.setup).at(end)
        parts = {("spawn" if use.fresh else "setup"): start}
        first = self.first_step(use, knobs, end)
        if first > 0:
            parts["first_steps"] = first
        return parts

    def windows(self, end: End) -> dict[str, float]:
        """Per phase, the windows a settling warm-up takes (the estimate's default where none)."""
        return {phase: cost.at(end) for phase, cost in self.warm_windows.items()}

    def unsettled_share(self, phase: str, end: End) -> float:
        cost = self.unsettled.get(phase)
        return cost.at(end) if cost is not None else 0.0

    def figures(self) -> dict[str, Cost]:
        """Every figure by name (what a prediction lists, measured or assumed)."""
        named: dict[str, Cost] = {
            "spawn": self.spawn,
            "setup": self.setup,
            "warm_first": self.warm_first,
            "conv_warm": self.conv_warm,
            "conv_floor": self.conv_floor,
            "batch_exponent": self.batch_exponent,
            "compile_cold": self.compile_cold,
            "compile_cached": self.compile_cached,
            "script": self.script,
            "capture": self.capture,
            "scale": self.scale,
        }
        if self.conv_new is not None:
            named["conv_new"] = self.conv_new
        named.update({f"first_fresh[{row}]": cost for row, cost in self.first_fresh.items()})
        named.update({f"conv_new[{row}]": cost for row, cost in self.conv_new_rows.items()})
        named.update({f"unsettled[{phase}]": cost for phase, cost in self.unsettled.items()})
        named.update({f"warm_windows[{p}]": cost for p, cost in self.warm_windows.items()})
        return named


def _opposite(end: End) -> End:
    return {"low": "high", "likely": "likely", "high": "low"}[end]  # type: ignore[return-value]


def row_of(knobs: Mapping[str, Any]) -> str:
    """The measured row whose conv plans a configuration shares (knobs.json's names)."""
    if knobs.get("amp_mode") in ("bf16", "fp16"):
        return f"amp {knobs['amp_mode']}"
    if knobs.get("tf32") is False:
        return "tf32 off"
    if knobs.get("channels_last"):
        return "channels_last"
    return "baseline"


def conv_row(knobs: Mapping[str, Any]) -> str:
    """The row a first step is priced by: `row_of`'s, and channels_last beside an AMP mode
    (on the second H200 ladder bf16 + channels_last's first step took 32.5 s, bf16's alone
    12.5 s: the layout is a conv plan of its own)."""
    row = row_of(knobs)
    if row.startswith("amp") and knobs.get("channels_last"):
        return f"{row} + channels_last"
    return row


def _between_parts(rows: Mapping[str, Cost], row: str) -> Cost | None:
    """A combined row no run measured: its AMP part's price, up to its dearest part's."""
    parts = [rows[name] for name in row.split(" + ") if name in rows]
    if not parts:
        return None
    high = max(c.high for c in parts)
    return Cost.assumed(
        parts[0].likely,
        low=min(c.low for c in parts),
        high=high,
        source=f"{row}: not measured; its parts' first steps ({', '.join(row.split(' + '))})",
        settle=f"a first step of {row} (a ladder journal)",
    )
