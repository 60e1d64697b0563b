"""SMART-MIG's mean-field repartitioning controller (Section IV-D) with CEDF placing jobs.

State (mean field): the share of GPUs in each of the 12 configurations, the histogram of
waiting jobs' durations (fastest time, log bins) and of the time left to their
deadlines, plus two numbers of ours (waiting jobs per compute slice, busy share of the
slices) since a histogram loses the queue's size. Action: a 12x12 row-stochastic matrix
``h`` (Eq. 5); every GPU draws its next configuration from the row of its current one,
restricted to configurations that keep its running jobs where they are (jobs are not
preempted; the paper's simulator may, Slurm cannot) and to the k most likely (top-k).
The network is a small MLP trained with PPO in the simulator
(``sim.controller_train``); its weights ship as numpy arrays, so inference imports no
torch.

Stateless, so that the daemon, the simulator and ``plan --start`` decide alike from one
snapshot: a GPU's configuration is read off its instances (``mig_configs.infer_config``),
and the draws come from a generator seeded by the snapshot's seed and clock. The paper
consults the controller every 5 events; here each decision consults it with
probability ``1/every`` (the same rate, drawn from that generator). The 4 s
repartitioning penalty is folded into the deadlines, as the paper does: CEDF and the
state see every deadline ``penalty_s`` early.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache, partial
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..geometry import GpuModel, slot_mask
from .decisions import Create, Decisions, Destroy, Op
from .edf import DEFAULT_SLACK, assign_jobs, planning_deadline
from .mig_configs import Layout, MigConfig, configs_for, fits, infer_config, parse_configs, realise
from .registry import UnknownPolicy
from .snapshot import ClusterSnapshot, Gpu, Instance, Job

__all__ = [
    "CHECKPOINT",
    "DURATION_EDGES",
    "SLACK_EDGES",
    "STATE_SIZE",
    "Controller",
    "Draw",
    "SmartMigPolicy",
    "features",
    "top_k",
]

N_CONFIGS = 12
DURATION_EDGES = (60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 3840.0)  # s, fastest time
SLACK_EDGES = (0.0, 60.0, 240.0, 960.0, 3840.0)  # s to the deadline (below 0: late)
STATE_SIZE = N_CONFIGS + len(DURATION_EDGES) + 1 + len(SLACK_EDGES) + 1 + 2
CHECKPOINT = "smart_mig_controller.npz"
PENALTY_S = 4.0
_LAYERS = ("w1", "b1", "w2", "b2", "wa", "ba")


def _hist(values: Sequence[float], edges: Sequence[float]) -> list[float]:
    out = [0.0] * (len(edges) + 1)
    for v in values:
        k = 0
        while k < len(edges) and v >= edges[k]:
            k += 1
        out[k] += 1.0
    n = len(values)
    return [x / n for x in out] if n else out


def features(
    snap: ClusterSnapshot,
    current: Sequence[MigConfig],
    *,
    penalty_s: float = PENALTY_S,
    default_slack: float = DEFAULT_SLACK,
) -> np.ndarray:
    """The controller's state (module doc) as a vector of ``STATE_SIZE`` numbers in [0, 1]."""
    m = len(snap.gpus)
    mu = [0.0] * N_CONFIGS
    for c in current:
        mu[c.number - 1] += 1.0 / m
    jobs: list[Job] = list(snap.pending.values())
    durations = [min(j.times.values(), default=math.inf) for j in jobs]
    slack = [planning_deadline(j, default_slack) - penalty_s - snap.now for j in jobs]
    slices = m * snap.model.compute_slices
    busy = sum(g.compute_mask.bit_count() for g in snap.gpus)
    extra = [min(1.0, len(jobs) / (4.0 * slices)), busy / slices]
    vec = mu + _hist(durations, DURATION_EDGES) + _hist(slack, SLACK_EDGES) + extra
    return np.asarray(vec, dtype=np.float64)


def top_k(row: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """``row`` (probabilities) kept on its ``k`` largest entries among ``allowed``
    (ties to the lower index), renormalised; all zero if nothing is allowed."""
    p = np.where(allowed, row, 0.0) if allowed is not None else np.asarray(row, dtype=float)
    keep = np.argsort(-p, kind="stable")[:k]
    out = np.zeros_like(p, dtype=float)
    out[keep] = p[keep]
    total = out.sum()
    return out / total if total > 0 else out


@dataclass(frozen=True)
class Controller:
    """The actor network: ``matrix(state)`` is Eq. 5's ``h`` (12 x 12, rows sum to 1)."""

    weights: dict[str, np.ndarray] = field(hash=False)
    meta: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def load(cls, path: str | Path | None = None) -> Controller:
        """The shipped controller, or one saved by ``slurm-mig train-controller``."""
        if path is None:
            return _packaged()
        return _load(Path(path))

    def logits(self, state: np.ndarray) -> np.ndarray:
        w = self.weights
        h = np.tanh(state @ w["w1"] + w["b1"])
        h = np.tanh(h @ w["w2"] + w["b2"])
        return (h @ w["wa"] + w["ba"]).reshape(N_CONFIGS, N_CONFIGS)

    def matrix(self, state: np.ndarray) -> np.ndarray:
        z = self.logits(state)
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


def _load(path: Path) -> Controller:
    try:
        with np.load(path, allow_pickle=False) as data:
            weights = {k: np.asarray(data[k], dtype=np.float64) for k in _LAYERS}
            meta = {k[5:]: data[k].item() for k in data.files if k.startswith("meta_")}
    except (OSError, KeyError, ValueError) as exc:
        raise UnknownPolicy(
            f"smart-mig checkpoint {path}: cannot read it ({exc}); give a file written by "
            "slurm-mig train-controller"
        ) from None
    hidden = weights["w1"].shape[1] if weights["w1"].ndim == 2 else -1
    want = {
        "w1": (STATE_SIZE, hidden),
        "b1": (hidden,),
        "w2": (hidden, weights["w2"].shape[-1]),
        "b2": (weights["w2"].shape[-1],),
        "wa": (weights["w2"].shape[-1], N_CONFIGS * N_CONFIGS),
        "ba": (N_CONFIGS * N_CONFIGS,),
    }
    for k, shape in want.items():
        if weights[k].shape != shape or not np.all(np.isfinite(weights[k])):
            raise UnknownPolicy(
                f"smart-mig checkpoint {path}: {k} has shape {weights[k].shape}, expected "
                f"{shape} of finite numbers; retrain with slurm-mig train-controller"
            )
    return Controller(weights, meta)


@cache
def _packaged() -> Controller:
    ref = resources.files("slurm_mig") / "data" / CHECKPOINT
    with resources.as_file(ref) as path:
        return _load(Path(path))


@dataclass(frozen=True)
class Draw:
    """What the controller did at one decision (for training and reports): the state,
    each GPU's configuration before and after (numbers), and per GPU the
    configurations it could draw from (after the feasibility and top-k cuts)."""

    state: np.ndarray
    before: tuple[int, ...]
    after: tuple[int, ...]
    support: np.ndarray  # (gpus, 12) bool
    probs: np.ndarray  # (gpus, 12) the renormalised rows drawn from


class SmartMigPolicy:
    """The SMART-MIG policy (module doc). Options: ``k`` (top-k, default 3), ``every``
    (controller consulted at 1 in ``every`` decisions, default 5), ``penalty_s`` (4),
    ``configs`` (the configurations GPUs start in, default Fig. 12's static list),
    ``checkpoint`` (a file from ``train-controller``; default the shipped one),
    ``default_slack`` (deadline of jobs without one, in fastest times)."""

    kind = "online"

    def __init__(
        self,
        name: str = "smart-mig",
        *,
        k: int = 3,
        every: int = 5,
        penalty_s: float = PENALTY_S,
        configs: str | Sequence[int] | None = None,
        checkpoint: str | None = None,
        default_slack: float = DEFAULT_SLACK,
        controller: Controller | None = None,
    ) -> None:
        try:
            k, every, penalty_s = int(k), int(every), float(penalty_s)
        except (TypeError, ValueError):
            raise UnknownPolicy(
                f"policy {name!r}: k, every and penalty_s must be numbers"
            ) from None
        if not 1 <= k <= N_CONFIGS:
            raise UnknownPolicy(f"policy {name!r}: k {k} must be in 1..{N_CONFIGS}")
        if not 1 <= every <= 1000:
            raise UnknownPolicy(f"policy {name!r}: every {every} must be in 1..1000")
        if not 0.0 <= penalty_s <= 3600.0:
            raise UnknownPolicy(f"policy {name!r}: penalty_s {penalty_s} must be in [0, 3600]")
        self.name = name
        self.k, self.every, self.penalty_s = k, every, penalty_s
        self.default_slack = float(default_slack)
        self.spec = configs
        self.controller = controller if controller is not None else Controller.load(checkpoint)
        self.record: list[Draw] | None = None  # set to a list to keep every Draw
        self.repartitions = 0

    def _configs(self, model: GpuModel) -> tuple[tuple[MigConfig, ...], tuple[MigConfig, ...]]:
        cfgs = configs_for(model)
        if len(cfgs) != N_CONFIGS:
            raise UnknownPolicy(
                f"policy {self.name!r}: the controller knows the {N_CONFIGS} configurations "
                f"of 7-slice GPUs; {model.name} has {len(cfgs)}; use cedf there"
            )
        try:
            start = parse_configs(self.spec, model)
        except ValueError as exc:
            raise UnknownPolicy(f"policy {self.name!r}: {exc}") from None
        return cfgs, start

    def _static(self, snap: ClusterSnapshot) -> Decisions:
        """A model without the 12 configurations the controller knows (e.g. the A30's
        4): CEDF on static configurations, so that a mixed cluster keeps running."""
        ops = assign_jobs(
            snap,
            _static_layouts(self.spec, snap),
            "cedf",
            default_slack=self.default_slack,
            shift=self.penalty_s,
        )
        return Decisions(tuple(ops), stats={"controller": False, "static": snap.model.name})

    def draw(self, snap: ClusterSnapshot, current: Sequence[MigConfig], rng: random.Random) -> Draw:
        """Eq. 5 and top-k: each GPU's next configuration."""
        state = features(snap, current, penalty_s=self.penalty_s, default_slack=self.default_slack)
        h = self.controller.matrix(state)
        m = len(snap.gpus)
        support = np.zeros((m, N_CONFIGS), dtype=bool)
        probs = np.zeros((m, N_CONFIGS))
        after = []
        for i, g in enumerate(snap.gpus):
            c = current[i]
            busy = tuple(i.slot for i in g.instances if i.job is not None)
            p = _row(h, c.number, self.k, _allowed(snap.model.name, busy, c.number))
            u = rng.random()
            j = int(np.searchsorted(np.cumsum(p), u, side="right"))
            j = min(j, N_CONFIGS - 1)
            while p[j] == 0.0 and j > 0:
                j -= 1
            support[i] = p > 0
            probs[i] = p
            after.append(j + 1)
        return Draw(state, tuple(c.number for c in current), tuple(after), support, probs)

    def decide(self, snap: ClusterSnapshot) -> Decisions:
        if len(configs_for(snap.model)) != N_CONFIGS:
            return self._static(snap)
        cfgs, start = self._configs(snap.model)
        current = [infer_config(g, cfgs, start[i % len(start)]) for i, g in enumerate(snap.gpus)]
        rng = random.Random(f"smart-mig:{snap.seed}:{snap.now!r}")
        target = list(current)
        draw = None
        if rng.random() * self.every < 1.0:
            draw = self.draw(snap, current, rng)
            target = [cfgs[n - 1] for n in draw.after]
            if self.record is not None:
                self.record.append(draw)
        ops: list[Op] = []
        gpus: list[Gpu] = []
        layouts: list[Layout] = []
        moved = []
        for i, g in enumerate(snap.gpus):
            lay = realise(target[i], g)
            g2, g_ops = _repartition(g, lay, snap)
            ops.extend(g_ops)
            gpus.append(g2)
            layouts.append(lay)
            if target[i] != current[i]:
                moved.append((i, current[i].number, target[i].number))
        self.repartitions += len(moved)
        ops.extend(
            assign_jobs(
                snap,
                layouts,
                "cedf",
                default_slack=self.default_slack,
                shift=self.penalty_s,
                gpus=gpus,
            )
        )
        stats = {"repartitions": tuple(moved), "controller": draw is not None}
        return Decisions(tuple(ops), stats=stats)


def _static_layouts(spec, snap: ClusterSnapshot) -> list[Layout]:
    try:
        cfgs = parse_configs(spec, snap.model)
    except ValueError:  # numbers of the A100's list: this model's own configurations
        cfgs = parse_configs(None, snap.model)
    return [realise(cfgs[i % len(cfgs)], g) for i, g in enumerate(snap.gpus)]


@lru_cache(maxsize=4096)
def _allowed_cached(model: str, busy: tuple, stay: int) -> tuple[bool, ...]:
    gpu = Gpu(0, tuple(Instance(s, "busy") for s in busy))
    out = [fits(x, gpu) for x in configs_for(model)]
    out[stay - 1] = True  # staying is always possible
    return tuple(out)


def _allowed(model: str, busy: tuple, stay: int) -> np.ndarray:
    """Configurations a GPU with jobs on ``busy`` slots can take without stopping one."""
    return np.array(_allowed_cached(model, busy, stay), dtype=bool)


def _row(h: np.ndarray, current: int, k: int, allowed: np.ndarray) -> np.ndarray:
    return top_k(h[current - 1], k, allowed)


def _repartition(gpu: Gpu, lay: Layout, snap: ClusterSnapshot) -> tuple[Gpu, list[Op]]:
    """Destroy the idle instances outside the layout, create its missing free slots (the
    simulator keeps them, which is how the next snapshot shows the configuration; the
    daemon leaves instances to the hooks and ignores these)."""
    want = set(lay.slots)
    ops: list[Op] = []
    keep: list[Instance] = []
    for inst in gpu.instances:
        if inst.job is None and inst.slot not in want:
            ops.append(Destroy(gpu.index, inst.slot))
        else:
            keep.append(inst)
    held = 0
    for inst in keep:
        held |= slot_mask(inst.slot)
    have = {i.slot for i in keep}
    for slot in lay.free:
        if slot not in have and not slot_mask(slot) & held:
            ops.append(Create(gpu.index, slot))
            keep.append(Instance(slot, None, snap.now))
            held |= slot_mask(slot)
    if not ops:
        return gpu, ops
    keep.sort(key=lambda i: (i.slot.placement.start, i.slot.size))
    return Gpu(gpu.index, tuple(keep), gpu.channel_free, gpu.pcie_jobs, gpu.node, gpu.local), ops


POLICIES = {"smart-mig": partial(SmartMigPolicy, "smart-mig")}  # options in SmartMigPolicy
