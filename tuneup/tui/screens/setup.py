"""The SETUP screen: the machine, a preset, the data, the stages to probe and the time it will take.

Nothing here runs a probe or writes a file: Start posts `SetupScreen.Start`
with what the user chose, and the app builds the session. The estimate
comes from `tuneup.costs.estimate` (pure) and is redrawn whenever a stage,
the preset or the time budget changes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, Select, SelectionList, Static
from textual.widgets.selection_list import Selection

from tuneup.cluster.job import JobEnv
from tuneup.costs.estimate import (
    Habits,
    ProbeCosts,
    StageShape,
    StepModel,
    fits,
    ladder_shape,
    time_limit,
)
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import ProbePreset, load_preset, preset_stage
from tuneup.probe.batches import config_batch
from tuneup.probe.durations import duration_text
from tuneup.probe.stages import Proposal, Stage
from tuneup.probe.types import ProbeBudget
from tuneup.tuning.clock.ladder_record import LadderCosts
from tuneup.tuning.clock.planner import plan_ladder
from tuneup.tuning.clock.time_left import prior, stage_shapes
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.request import SessionRequest, app_field, help_of, read_setting


def parse_layout(nproc_text: str, nodes_text: str) -> tuple[int, int]:
    """The ranks row as (nproc, nodes), each read as its flag reads it (an empty field: 1);
    a UsageError names the flag of a field that is not a positive count."""
    nproc = read_setting("nproc", nproc_text.strip() or "1")
    nodes = read_setting("nodes", nodes_text.strip() or "1")
    return int(nproc), int(nodes)


def machine_lines(
    machine: MachineInfo, job: JobEnv | None, now: float, gpu_memory_gib: tuple[float, ...] = ()
) -> list[str]:
    """The machine as a few lines: GPUs, CPUs, and the SLURM job with its time left."""
    if machine.gpu_names:
        names = []
        for i, name in enumerate(machine.gpu_names):
            memory = f" ({gpu_memory_gib[i]:.0f} GiB)" if i < len(gpu_memory_gib) else ""
            names.append(f"{name}{memory}")
        gpus = f"{machine.gpu_count} x " + ", ".join(sorted(set(names)))
    else:
        gpus = "none visible"
    cuda = "yes" if machine.cuda else "no"
    lines = [f"GPUs: {gpus}   CUDA: {cuda}", f"CPU cores usable: {machine.cpus_usable}"]
    if job is None or not job.in_slurm:
        lines.append("SLURM: not in a job")
        return lines
    nodes = ", ".join(job.nodes[:4]) + (" ..." if len(job.nodes) > 4 else "")
    gpu_list = ",".join(str(g) for g in job.gpus) if job.gpus else "not stated"
    left = allocation_left_s(job, now)
    when = duration_text(left) if left is not None else "unknown"
    lines.append(f"SLURM job {job.job_id}: {len(job.nodes)} node(s) {nodes}; GPUs {gpu_list}")
    lines.append(f"time left in the allocation: {when}")
    return lines + [f"warning: {ignored.line}" for ignored in job.ignored]


def allocation_left_s(job: JobEnv | None, now: float) -> float | None:
    """Seconds until the job's time limit; None outside SLURM or when SLURM does not say."""
    if job is None or job.end_time is None:
        return None
    return max(0.0, job.end_time - now)


def budget_text(budget: ProbeBudget) -> str:
    return (
        f"per probe: trials of {budget.trial_s:g} s ({budget.min_trials}-{budget.max_trials} "
        f"a phase, to agree within {100 * budget.trial_noise:g}%), warm-up to steady "
        f"(<= {duration_text(budget.warmup_cap_s)}), loss over {budget.loss_steps} steps, "
        f"<= {duration_text(budget.limit_s)}"
    )


def stage_prompt(proposal: Proposal) -> str:
    """A checklist line: the stage and its candidates, or why it cannot run here."""
    if proposal.skipped:
        return f"{proposal.stage}: unavailable - {proposal.reason}"
    labels = ", ".join(c.label for c in proposal.candidates)
    return f"{proposal.stage}: {labels}"


def resolve_data(text: str) -> Path | None:
    """The data path typed, checked with inspect_box; empty means synthesize a box."""
    text = text.strip()
    if not text:
        return None
    from tuneup.unet.boxfile import inspect_box  # h5py: only to read a user's box

    path = Path(text).expanduser()
    inspect_box(path)  # a UsageError names what is wrong with the file
    return path


class SetupScreen(Screen[None]):
    """Choose what to probe; the estimate says whether it fits before anything starts.

    Args:
        machine: what this machine offers (stages it cannot run are shown disabled).
        job: the job, for its SLURM nodes and time left; None (or a local job) outside SLURM.
        preset_name: the preset chosen first.
        presets: (name, description) of the presets to offer.
        step_model: the estimate's start-up and step-time guesses.
        recorded: what a preset's ladder cost on this machine before (LadderRecord),
            by preset name and layout: the estimate's costs where known, not guesses.
        time_budget_s: the session's time budget, if the user gave one.
        clock: epoch seconds now (tests freeze it).
        gpu_memory_gib: each GPU's memory, when known.
        nproc, nodes: the rank layout offered first (what the allocation gives).
    """

    DEFAULT_CSS = """
    SetupScreen { layout: vertical; }
    SetupScreen #body { height: 1fr; }
    SetupScreen .section { color: $accent; text-style: bold; margin-top: 1; }
    SetupScreen #machine { padding: 0 1; }
    SetupScreen #stages { height: auto; max-height: 12; }
    SetupScreen #preset-row, SetupScreen #data-row, SetupScreen #actions {
        height: auto;
    }
    SetupScreen #preset { width: 30; }
    SetupScreen #preset-description { padding: 0 1; width: 1fr; }
    SetupScreen #data { width: 1fr; }
    SetupScreen #time-budget { width: 12; }
    SetupScreen .field { padding: 1 1 0 1; width: auto; }
    SetupScreen #layout-row { height: auto; }
    SetupScreen #nproc, SetupScreen #nodes { width: 10; }
    SetupScreen #actions { height: auto; border-top: solid $panel; }
    SetupScreen #buttons { height: auto; }
    SetupScreen #layout-note { padding: 0 1; width: 1fr; }
    SetupScreen #data-error, SetupScreen #budget-error { color: $error; padding: 0 1; }
    SetupScreen #budget-error { display: none; }
    SetupScreen #budget-error.shown { display: block; }
    SetupScreen #estimate { padding: 0 1; height: auto; }
    SetupScreen #estimate.over { color: $warning; }
    SetupScreen #trim { display: none; }
    SetupScreen #trim.offered { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "start", "start"),
        Binding("ctrl+t", "trim", "trim"),
    ]

    class Start(Message):
        """The user pressed Start with a valid choice: the request `tuneup probe` would make of
        the same flags (the app adds its trainer and seed), and the preset it names, loaded
        (the session takes it as it is; its name names the session's folder)."""

        def __init__(self, request: SessionRequest, preset: ProbePreset) -> None:
            super().__init__()
            self.request = request
            self.preset = preset

    def __init__(
        self,
        machine: MachineInfo,
        *,
        job: JobEnv | None,
        preset_name: str,
        presets: list[tuple[str, str]],
        step_model: StepModel,
        recorded: Callable[[str, MachineInfo], LadderCosts | None] | None = None,
        time_budget_s: float | None = None,
        clock: Callable[[], float] = time.time,
        gpu_memory_gib: tuple[float, ...] = (),
        nproc: int = 1,
        nodes: int = 1,
        preset: ProbePreset | None = None,
    ) -> None:
        super().__init__()
        self.recorded = recorded
        self.nproc, self.nodes = nproc, nodes
        self.machine = dataclasses.replace(machine, world_size=nproc * nodes, nodes=nodes)
        self.job = job
        self.presets = presets
        self.step_model = step_model
        self.time_budget_s = time_budget_s
        self.budget_error = ""  # the budget field's text does not read as a budget
        self.clock = clock
        self.gpu_memory_gib = gpu_memory_gib
        self.preset = preset or load_preset(preset_name)  # the command's, where it loaded one
        # A preset given as a file is offered by its path beside the installed ones.
        names = {name for name, _ in presets}
        self.preset_key = self.preset.name if self.preset.name in names else preset_name
        self.budget = self.preset.budget
        self.proposals: list[Proposal] = []
        self.stages: dict[str, Stage] = {}
        self.fewer: dict[str, int] = {}  # a trim's dearest candidates left out, by stage

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            yield Label("Machine", classes="section")
            yield Static(self._machine_text(), id="machine")
            yield Label("Preset", classes="section")
            with Horizontal(id="preset-row"):
                yield Select(
                    self._preset_options(),
                    value=self.preset_key,
                    allow_blank=False,
                    id="preset",
                )
                yield Static(self.preset.description, id="preset-description")
            yield Label("Data and time budget", classes="section")
            with Horizontal(id="data-row"):
                yield Label("data", classes="field")
                yield setting_input("data_path")
                yield Label("budget", classes="field")
                yield setting_input("time_budget_s")
            yield Static("", id="data-error")
            yield Static("", id="budget-error")
            yield Label("Ranks", classes="section")
            with Horizontal(id="layout-row"):
                yield Label("per node", classes="field")
                yield setting_input("nproc", str(self.nproc))
                yield Label("nodes", classes="field")
                yield setting_input("nodes", str(self.nodes))
                yield Static(self._layout_text(), id="layout-note")
            yield Label("Stages", classes="section")
            yield SelectionList[str](id="stages")
            yield Static(budget_text(self.budget), id="budget")
        # Always in view, whatever the terminal's height: what it costs, and the way on.
        with Vertical(id="actions"):
            yield Static("", id="estimate")
            with Horizontal(id="buttons"):
                yield Button("Trim to fit", id="trim", variant="warning")
                yield Button("Start", id="start", variant="primary")
        yield Footer()

    def on_mount(self) -> None:
        if self.time_budget_s is not None:
            self.query_one("#time-budget", Input).value = f"{self.time_budget_s:g}s"
        self._fill_stages()

    # What is shown

    def _machine_text(self) -> str:
        return "\n".join(machine_lines(self.machine, self.job, self.clock(), self.gpu_memory_gib))

    def _layout_text(self) -> str:
        ranks = self.nproc * self.nodes
        if ranks == 1:
            return "1 rank: each probe is one process"
        how = "srun across the allocation" if self.nodes > 1 else "torchrun on this node"
        return f"{ranks} ranks ({self.nproc} per node x {self.nodes} node(s)) through {how}"

    def _fill_stages(self) -> None:
        self.fewer = {}  # another preset or layout: a trim decides again
        base = dict(self.preset.train)
        self.stages = {n: preset_stage(n, self.preset) for n in self.preset.stages}
        self.proposals = [stage.propose(self.machine, base) for stage in self.stages.values()]
        stages = self.query_one("#stages", SelectionList)
        stages.clear_options()
        stages.add_options(
            [
                Selection(stage_prompt(p), p.stage, not p.skipped, disabled=p.skipped)
                for p in self.proposals
            ]
        )
        self.query_one("#budget", Static).update(budget_text(self.budget))
        self._show_estimate()

    def chosen(self) -> list[Proposal]:
        """The checked stages that can run, in ladder order."""
        selected = set(self.query_one("#stages", SelectionList).selected)
        return [p for p in self.proposals if p.stage in selected and not p.skipped]

    def measured(self) -> LadderCosts | None:
        """What this preset's ladder cost on this machine before, if it ran here."""
        if self.recorded is None:
            return None
        return self.recorded(self.preset.name, self.machine)

    def whole_shapes(self) -> list[StageShape]:
        """The checked stages as the ladder model sees them, each with all its candidates
        (and its shapes of fewer, what a trim may choose)."""
        plans = [
            StagePlan(
                p.stage,
                list(p.candidates),
                judged=self.stages[p.stage].judged_on,
                expected_gain=self.stages[p.stage].expected_gain,
            )
            for p in self.chosen()
        ]
        return stage_shapes(plans, config_batch(self.preset.train))

    def shapes(self) -> list[StageShape]:
        """The checked stages as the ladder will run them: less the dearest candidates the
        last trim left out (`tuneup probe` leaves out the same, planning the same budget)."""
        return [
            s.fewer[left - 1] if (left := self.fewer.get(s.name, 0)) and left <= len(s.fewer) else s
            for s in self.whole_shapes()
        ]

    def prior(self) -> tuple[ProbeCosts, Habits, str]:
        """What a probe costs here, as `tuneup probe` prices it before its first probe: an
        earlier ladder's record, else the preset's costs, else the trainer's guess."""
        shares = self.machine.world_size == 1
        return prior(self.measured(), self.preset, self.step_model, shares)

    def estimate_s(self, priced: tuple[ProbeCosts, Habits, str] | None = None) -> float:
        """The checked ladder's time, priced by `priced` (read afresh when None)."""
        costs, habits, _ = priced or self.prior()
        return ladder_shape(self.shapes(), habits=habits).seconds(self.budget, costs)

    def limit_s(self) -> float | None:
        return time_limit(self.time_budget_s, allocation_left_s(self.job, self.clock()))

    def _show_estimate(self) -> None:
        priced = self.prior()  # an earlier ladder's record is read once a redraw
        ok, message = fits(
            self.estimate_s(priced), self.time_budget_s, allocation_left_s(self.job, self.clock())
        )
        count = len(self.chosen())
        text = f"{count} stage(s): {message} ({priced[2]})"
        if not ok:
            text += " - trim the ladder, or raise the budget"
        estimate = self.query_one("#estimate", Static)
        estimate.update(text)
        estimate.set_class(not ok, "over")
        self.query_one("#trim", Button).set_class(not ok, "offered")

    # Events

    def _preset_options(self) -> list[tuple[str, str]]:
        options = [(name, name) for name, _ in self.presets]
        if self.preset_key not in {name for name, _ in self.presets}:
            options.append((f"{self.preset.name} ({self.preset_key})", self.preset_key))
        return options

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        self._show_estimate()

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id != "preset" or event.value == self.preset_key:
            return
        try:
            self.preset = load_preset(str(event.value))
        except UsageError as exc:
            self.notify(str(exc), severity="error")
            return
        self.preset_key = str(event.value)
        self.budget = self.preset.budget
        self.query_one("#preset-description", Static).update(self.preset.description)
        self._fill_stages()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "time-budget":
            try:
                given = event.value.strip()  # as --budget reads it; empty: no budget
                seconds = read_setting("time_budget_s", given) if given else None
            except UsageError as exc:  # said at once, and Start refuses it
                self.budget_error = str(exc)
            else:
                self.budget_error = ""
                self.time_budget_s = seconds
                self.fewer = {}  # another budget: a trim decides again
            said = self.query_one("#budget-error", Static)
            said.update(self.budget_error)
            said.set_class(bool(self.budget_error), "shown")
            self._show_estimate()
        elif event.input.id == "data":
            self.query_one("#data-error", Static).update("")
        elif event.input.id in ("nproc", "nodes"):
            try:
                nproc, nodes = parse_layout(
                    self.query_one("#nproc", Input).value, self.query_one("#nodes", Input).value
                )
            except UsageError as exc:
                self.query_one("#layout-note", Static).update(str(exc))
                return
            if (nproc, nodes) != (self.nproc, self.nodes):
                self.nproc, self.nodes = nproc, nodes
                self.machine = dataclasses.replace(
                    self.machine, world_size=nproc * nodes, nodes=nodes
                )
                self._fill_stages()  # the ddp stage runs only with several ranks
            self.query_one("#layout-note", Static).update(self._layout_text())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "trim":
            self.action_trim()
        elif event.button.id == "start":
            self.action_start()

    def action_trim(self) -> None:
        """Plan the ladder to the time budget: shorter trials, then the stages of least
        expected gain per second unchecked (tuneup.tuning.clock.planner)."""
        costs, habits, _ = self.prior()
        whole = self.whole_shapes()
        plan = plan_ladder(whole, self.budget, costs, self.limit_s(), habits=habits)
        self.fewer = {name: len(left) for name, left, _ in plan.trimmed}
        stages = self.query_one("#stages", SelectionList)
        for shape in whole:
            if shape.name not in plan.stages:
                stages.deselect(shape.name)
        if plan.budget != self.budget:
            self.budget = plan.budget
            self.query_one("#budget", Static).update(budget_text(self.budget))
        self._show_estimate()
        if not plan.fits:
            self.notify("even the baseline alone does not fit: raise the budget", severity="error")

    def action_start(self) -> None:
        if self.budget_error:
            self.notify(self.budget_error, severity="error")
            return
        try:
            data = resolve_data(self.query_one("#data", Input).value)
        except UsageError as exc:
            self.query_one("#data-error", Static).update(str(exc))
            return
        # Stages skipped on the preset's own config stay in the ladder, as in `tuneup probe`:
        # they re-propose on the incumbent and may run once an earlier stage has won.
        selected = set(self.query_one("#stages", SelectionList).selected)
        stages = tuple(p.stage for p in self.proposals if p.skipped or p.stage in selected)
        try:
            nproc, nodes = parse_layout(
                self.query_one("#nproc", Input).value, self.query_one("#nodes", Input).value
            )
        except UsageError as exc:
            self.notify(str(exc), severity="error")
            return
        request = SessionRequest(
            preset=self.preset.source or self.preset.name,
            stages=stages,
            nproc=nproc,
            nodes=nodes,
            data_path=data,
            budget=dataclasses.replace(self.budget),
            time_budget_s=self.time_budget_s,
        )
        self.post_message(self.Start(request, self.preset))


def setting_input(setting: str, value: str = "") -> Input:
    """A setting's field as the request declares it (request.app_field), with the flag's
    help as its tooltip: the words of its --help."""
    face = app_field(setting)
    widget = Input(value, placeholder=face.placeholder, id=face.id)
    widget.tooltip = help_of(setting)
    return widget
