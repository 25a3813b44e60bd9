"""The data the real run reads, kept by a session: what it weighs its candidates against.

A preset states the boxes the run reads (`real_data`: the tutorial's 1024^3 + 512^3 unless
it says otherwise); `--data` (or a preset's own `train_path`) points at the user's files,
whose boxes are read from their headers. Every candidate whose loader holds its boxes whole
is weighed against them (datafit.py): before it runs, where it brings that loader in, with
the incumbent's measured peak at its batch (the stage plans leave it out, saying why); after
it ran the model, with its own peak (the session marks it so that it is never adopted). A
stage's line then names the next best: its winner, else what it kept.

Where the probes read a smaller synthetic box, summary.json's `real_data` block says which
figures may move.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.bundled import cache_dir
from tuneup.config import Boxes, build_config
from tuneup.errors import DataFault, UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.preset.types import ProbePreset
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, ProbeResult, probe_key
from tuneup.tuning.search.search_records import StageDecision
from tuneup.tuning.session.datafit import GIB, NOT_FOR_IT, holds_on, size_text, weigh

MAY_MOVE = "IO on a larger file and the first epoch's reads may move"
_REFUSED = re.compile(rf"([^,(;]+): (?:oom \()?{NOT_FOR_IT}")  # the label before the words


@dataclass
class RealData:
    """The boxes the real run reads, those the probes read, and the model's measured peaks.

    Attributes:
        boxes: the boxes the run reads.
        source: whose they are, in words ("the tutorial's", "the preset's", "your files").
        probed: the boxes the probes read where they differ (tuneup's synthetic box); None:
            the probes read the real files.
        machine: the GPU's and the node's memory, the ranks.
    """

    boxes: Boxes
    source: str
    probed: Boxes | None
    machine: MachineInfo
    _peaks: dict[str, float] = field(default_factory=dict)

    # --- the model's peaks, as the probes measured them -----------------------------------

    def heard(self, result: ProbeResult) -> None:
        """Keep a probe's model peak (the allocator's, less its own box on the device), where
        it ran the model: an IO probe's peak holds no activations."""
        peak = self.model_peak_gib(result)
        if peak is not None:
            key = probe_key(result.config)
            self._peaks[key] = max(peak, self._peaks.get(key, 0.0))

    def model_peak_gib(self, result: ProbeResult) -> float | None:
        """The model's peak in a probe that ran it (SYNTHETIC or FULL), without the box the
        probe held on the device; None where it did not, or measured no peak."""
        ran_model = result.rate("synthetic") is not None or result.rate("full") is not None
        if not result.ok or result.mem_peak_mb is None or not ran_model:
            return None
        box = 0.0
        if holds_on(result.config, self.machine) == "device":
            box = _probe_box(result.config, self.probed or self.boxes).bytes / GIB
        return max(0.0, result.mem_peak_mb / 1024 - box)

    def peak_of(self, values: Mapping[str, Any]) -> float | None:
        """The model's largest measured peak with these values; None: none measured yet."""
        return self._peaks.get(probe_key(dict(values)))

    # --- the weighing -------------------------------------------------------------------

    def before(self, values: Mapping[str, Any], incumbent: Mapping[str, Any]) -> str | None:
        """Why a candidate that brings in a loader holding its boxes whole cannot hold the real
        ones, weighed with the incumbent's measured peak at its batch; None where it can, or
        its loader is the incumbent's (weighed after it runs, with its own peak)."""
        if values.get("data_loader_config") == incumbent.get("data_loader_config"):
            return None
        found = weigh(values, self.boxes, self.machine, self.peak_of(incumbent))
        if found is None or found.fits:
            return None
        return found.said()

    def after(self, stage: str, result: ProbeResult, values: Mapping[str, Any]) -> str | None:
        """Why a probe that ran (a candidate's, never the baseline's or the confirmation's)
        cannot be the run with the real data: its loader holds the boxes whole and they do
        not fit beside its own peak; None where they do, or it is not weighed."""
        if stage in (BASELINE_STAGE, CONFIRM_STAGE) or not result.ok:
            return None
        where = holds_on(values, self.machine)
        peak = self.model_peak_gib(result)
        if not where or (where == "device" and peak is None):
            return None  # an IO probe: weighed before it ran, with the incumbent's peak
        found = weigh(values, self.boxes, self.machine, peak)
        if found is None or found.fits:
            return None
        return found.said()

    # --- what the session says ---------------------------------------------------------

    def named(self, decisions: list[StageDecision]) -> list[StageDecision]:
        """The decisions with each candidate not for the real data naming the next best."""
        return [_with_next_best(d) for d in decisions]

    def note(self) -> str:
        """What may move where the probes read a smaller box than the run; "" where not."""
        if self.probed is None or self.probed.box >= self.boxes.box:
            return ""
        return f"{MAY_MOVE} (the probes read a {self.probed.box}^3 synthetic box)"

    def block(self, best: Mapping[str, Any], decisions: list[StageDecision]) -> dict[str, Any]:
        """summary.json's `real_data`: the boxes the run reads, those the probes read, what
        may move, the candidates not for the real data and whether the recommendation fits."""
        weighed = weigh(best, self.boxes, self.machine, self.peak_of(best))
        refused = [  # a stage none of whose candidates could says so in its reason
            f"{d.stage}: {entry}"
            for d in decisions
            for entry in (*d.not_tried, *d.failed, d.reason)
            if NOT_FOR_IT in entry
        ]
        said = [f"the run reads {self.boxes.text()} ({size_text(self.boxes.bytes)}, {self.source})"]
        if weighed is not None:
            holder = "GPU's" if weighed.where == "device" else "node's"
            room = f"{weighed.need_gib:.1f} of the {holder} {weighed.have_gib:.1f} GiB"
            fits = f"holds them ({room})" if weighed.fits else f"cannot hold them: {weighed.text}"
            said.append(f"the recommended {weighed.loader} loader {fits}")
        labels = [m.strip() for e in refused for m in _REFUSED.findall(e.split(": ", 1)[1])]
        if labels:
            said.append(f"not recommended for them: {', '.join(dict.fromkeys(labels))}")
        note = self.note()
        return {
            "boxes": self.boxes.to_dict(),
            "gib": round(self.boxes.bytes / GIB, 1),
            "source": self.source,
            "probed": None if self.probed is None else self.probed.to_dict(),
            "may_move": note,
            "not_for_it": refused,
            "recommended_fits": None if weighed is None else weighed.fits,
            "line": "; ".join([*said, note] if note else said),
        }


def _probe_box(config: Mapping[str, Any], boxes: Boxes) -> Boxes:
    """The boxes a probe of `config` held: the training box, the validation box where it
    validated (the probes do not: Nsamples_val 0)."""
    try:
        validates = build_config(dict(config), source="the probe config").Nsamples_val > 0
    except UsageError:
        validates = False
    return boxes if validates else Boxes(boxes.box)


def _with_next_best(decision: StageDecision) -> StageDecision:
    """A stage's decision whose candidates not for the real data name the next best: the
    stage's winner, else what it kept (its incumbent's loader and batch)."""
    marked = [e for e in (*decision.not_tried, *decision.failed) if NOT_FOR_IT in e]
    if not marked:
        return decision
    best = decision.winner or _kept(decision)
    said = f"; the next best is {best}"
    return dataclasses.replace(
        decision,
        not_tried=[e + said if NOT_FOR_IT in e else e for e in decision.not_tried],
        failed=[e + said if NOT_FOR_IT in e else e for e in decision.failed],
    )


def _kept(decision: StageDecision) -> str:
    """What a stage that adopted nothing kept, in words."""
    return kept_text(decision.incumbent.config if decision.incumbent is not None else {})


def kept_text(config: Mapping[str, Any]) -> str:
    """The incumbent a stage kept, in words: its loader and batch ("lowmem at batch 64,
    kept")."""
    if not config:
        return "the current config, kept"
    kept = [str(config.get("data_loader_config", "lowmem"))]
    batch = config.get("local_batch_size") or config.get("global_batch_size")
    if batch is not None:
        kept.append(f"at batch {batch}")
    return f"{' '.join(kept)}, kept"


def real_data_for(
    preset: ProbePreset, base: Mapping[str, Any], machine: MachineInfo
) -> RealData | None:
    """The data the session's run reads: the user's files where the base config reads them
    (`--data`, or the preset's own train_path), else the preset's `real_data`; None where
    neither says (a preset that probes on no synthetic box and names no file), or a user's
    file is not a box (the trainer's data check says why, before any probe).
    """
    train, val = base.get("train_path"), base.get("val_path")
    if train and Path(str(train)).is_file() and not _made_here(Path(str(train))):
        try:
            boxes = Boxes(_side(Path(str(train))), 0)
            if val and val != train and Path(str(val)).is_file():
                boxes = Boxes(boxes.box, _side(Path(str(val))))
        except DataFault:
            return None
        return RealData(boxes, "your files", None, machine)
    if preset.real_data is None:
        return None
    synth = preset.synthetic_data or {}
    probed = Boxes(int(synth["box"]), int(synth["val_box"])) if synth else None
    same = probed == preset.real_data
    source = "the preset's" if same or preset.document.get("real_data") else "the tutorial's"
    return RealData(preset.real_data, source, None if same else probed, machine)


def _made_here(path: Path) -> bool:
    """tuneup's own synthetic box (made in its cache), not the user's."""
    return path.resolve().is_relative_to(cache_dir().resolve())


def _side(path: Path) -> int:
    from tuneup.unet.boxfile import inspect_box  # h5py: only where a user's file is read

    return inspect_box(path).box
