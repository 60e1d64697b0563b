"""Training SMART-MIG's controller with PPO in the simulator (Section IV-D).

An episode is a day of the smart-mig workload (``deadline_workload``) on ``gpus``
A100s, run by the real engine under `planner.smartmig.SmartMigPolicy`, whose draws
(state, configurations before and after, the rows drawn from) are the agents'
actions. The reward of a step (Eq. 6) is what the cluster cost between one controller
decision and the next: ``-(tardiness + a * energy) / (1 + a)``, with tardiness the
seconds jobs spent past their deadlines in the interval (deadlines ``penalty_s``
early, as the paper folds in the repartitioning penalty) over the day's job count,
so that a day's rewards add up to ``-ET``. Each day's rewards are divided by the ET of
static CEDF on the same jobs: a return of -1 is CEDF's, above is better
(``reward="absolute"``). By default (``"vs-cedf"``; where the paper is silent) a step's
reward is that cost less static CEDF's over the same interval of the same day, so that
a day's return is CEDF's ET less the controller's. CEDF's cost does not depend on the
controller's draws, so the best controller is the same under both; the day's own load,
which neither controls, drops out of every step (on a 20x day the steps' spread falls
from 0.25 to 0.08), and PPO learns where the absolute reward did not (1,000 days: ET
1.1-1.2 x CEDF's on the training days against 0.7-0.8).

PPO (Schulman et al.) over the mean field: one actor for every GPU (the
representative agent), the clipped ratio per GPU's draw with the step's advantage
(GAE), a critic on the state. torch is imported here only.
"""

from __future__ import annotations

import bisect
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..geometry import get_model
from ..planner.edf import DeadlinePolicy
from ..planner.smartmig import N_CONFIGS, STATE_SIZE, Controller, SmartMigPolicy
from .deadline_workload import deadline_jobs
from .engine import Engine
from .metrics import et_value

# a = t/(2e) of static CEDF on the smart-mig workload at 20x on 8 A100s, seeds
# 1000-1004 (never used for training or figures), as ``calibrate_a()`` computes it.
DEFAULT_ET_A = 1.24e-6
TRAIN_SEED0 = 10_000


@dataclass(frozen=True)
class TrainSettings:
    """What ``slurm-mig train-controller`` runs (defaults: the shipped controller's)."""

    iterations: int = 60
    stay_bias: float = 6.0  # initial logit of keeping the configuration (p ~ 0.97)
    episodes: int = 2  # days simulated per PPO iteration
    gpus: int = 8
    rate_multiplier: float = 20.0
    seed: int = 0
    hidden: int = 64
    lr: float = 3e-4
    gamma: float = 0.99
    lam: float = 0.95
    clip: float = 0.2
    epochs: int = 4
    minibatch: int = 256
    entropy: float = 0.0  # a bonus pushes the rows toward uniform: more repartitions
    value_coef: float = 0.5
    k: int = 3
    every: int = 5
    penalty_s: float = 4.0
    a: float = DEFAULT_ET_A
    reward_scale: float = 100.0
    reward: str = "vs-cedf"  # "absolute": minus each step's cost alone (module doc)
    save_every: int = 10


@dataclass
class Rollout:
    """The steps of one episode (one per controller decision)."""

    states: list[np.ndarray] = field(default_factory=list)
    before: list[tuple[int, ...]] = field(default_factory=list)
    after: list[tuple[int, ...]] = field(default_factory=list)
    support: list[np.ndarray] = field(default_factory=list)
    logp: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    et_ratio: float = math.nan
    et: float = math.nan
    et_cedf: float = math.nan
    repartitions: int = 0
    jobs: int = 0


class _CostTrace:
    """Runs ``policy`` in the engine and notes the cost so far (energy and lateness,
    Eq. 4's terms) at each of its decisions: ``trace`` (time, cost)."""

    def __init__(self, policy, jobs, shift: float, a: float) -> None:
        self.policy = policy
        self.name = policy.name
        self.kind = "online"
        self.engine: Engine | None = None
        self.a = a
        self.n = len(jobs)
        self.due = {j.id: j.deadline - shift for j in jobs}
        self.done_late = 0.0
        self.trace: list[tuple[float, float]] = []

    def cost(self, snap) -> float:
        eng = self.engine
        assert eng is not None
        now = snap.now
        for jid, _ in snap.finished:
            f = eng.finish_t[eng.index[jid]]
            self.done_late += max(0.0, f - self.due[jid])
        late = self.done_late
        for jid in snap.pending:
            late += max(0.0, now - self.due[jid])
        for idx in eng.held:
            late += max(0.0, now - self.due[eng.jobs[idx].id])
        energy = 0.0
        curve = eng.curve
        for g in eng.gpu_state:
            energy += g.energy + curve[g.busy_slices] * (now - g.last_t)
        return (self.a * energy + late / self.n) / (1.0 + self.a)

    def decide(self, snap):
        self.trace.append((snap.now, self.cost(snap)))
        return self.policy.decide(snap)

    def at(self, t: float) -> float:
        """The cost noted at the last decision at or before ``t`` (0 before the first)."""
        k = bisect.bisect_right(self.trace, (t, math.inf))
        return self.trace[k - 1][1] if k else 0.0


class _Recorder(_CostTrace):
    """SmartMigPolicy in the engine, each of its draws charged the cost until the next:
    ``marks`` (cost) and ``mark_times`` at each draw."""

    def __init__(self, policy: SmartMigPolicy, jobs, shift: float, a: float) -> None:
        super().__init__(policy, jobs, shift, a)
        self.marks: list[float] = []
        self.mark_times: list[float] = []
        policy.record = []

    def decide(self, snap):
        before = len(self.policy.record)
        c = self.cost(snap)
        got = self.policy.decide(snap)
        if len(self.policy.record) > before:
            self.marks.append(c)
            self.mark_times.append(snap.now)
        return got


def _ids_deadline(jobs, shift: float):
    return [(j.id, j.deadline - shift) for j in jobs]


def episode_et(result, jobs, shift: float, a: float) -> float:
    """ET (Eq. 4) of one finished run with deadlines ``shift`` early."""
    due = dict(_ids_deadline(jobs, shift))
    late = math.fsum(max(0.0, f - due[i]) for i, f in zip(result.ids, result.finish))
    return et_value(result.energy_j, late / len(jobs), a)


def run_episode(controller: Controller, settings: TrainSettings, seed: int) -> Rollout:
    """One day under the controller (sampling as in production) and under static CEDF.
    Each draw's reward is minus the cost until the next draw (``reward="vs-cedf"``: less
    static CEDF's cost over the same interval of the same day), scaled by CEDF's ET."""
    model = get_model("A100-40GB")
    jobs = deadline_jobs(model, rate_multiplier=settings.rate_multiplier, days=1.0, seed=seed)
    policy = SmartMigPolicy(
        k=settings.k, every=settings.every, penalty_s=settings.penalty_s, controller=controller
    )
    rec = _Recorder(policy, jobs, settings.penalty_s, settings.a)
    eng = Engine(jobs, rec, 1, settings.gpus, model, seed)
    rec.engine = eng
    result = eng.run()
    et = episode_et(result, jobs, settings.penalty_s, settings.a)
    cedf = DeadlinePolicy("cedf")
    ref = _CostTrace(cedf, jobs, settings.penalty_s, settings.a)
    base_eng = Engine(
        jobs, ref if settings.reward == "vs-cedf" else cedf, 1, settings.gpus, model, seed
    )
    ref.engine = base_eng
    base = base_eng.run()
    et_ref = episode_et(base, jobs, settings.penalty_s, settings.a)
    norm = settings.reward_scale / max(et_ref, 1e-9)
    out = Rollout(
        et=et,
        et_cedf=et_ref,
        et_ratio=et / et_ref,
        repartitions=policy.repartitions,
        jobs=len(jobs),
    )
    marks = [*rec.marks, et]
    if settings.reward == "vs-cedf":
        ends = [*(ref.at(t) for t in rec.mark_times), et_ref]
        marks = [m - b for m, b in zip(marks, ends)]
    for i, d in enumerate(policy.record):
        out.states.append(d.state)
        out.before.append(d.before)
        out.after.append(d.after)
        out.support.append(d.support)
        rows = d.probs[np.arange(len(d.after)), np.asarray(d.after) - 1]
        out.logp.append(np.log(np.maximum(rows, 1e-12)))
        out.rewards.append(-(marks[i + 1] - marks[i]) * norm)
    return out


def calibrate_a(seeds=range(1000, 1005), gpus: int = 8, rate: float = 20.0) -> float:
    """``a = t/(2e)`` of static CEDF over the calibration seeds (module constant)."""
    model = get_model("A100-40GB")
    ts, es = [], []
    for s in seeds:
        jobs = deadline_jobs(model, rate_multiplier=rate, days=1.0, seed=s)
        r = Engine(jobs, DeadlinePolicy("cedf"), 1, gpus, model, s).run()
        ts.append(r.tardiness_mean)
        es.append(r.energy_j)
    return (sum(ts) / len(ts)) / (2.0 * sum(es) / len(es))


# ---------------------------------------------------------------------------
# PPO (torch)


def _net(settings: TrainSettings):
    import torch
    from torch import nn

    torch.manual_seed(settings.seed)
    h = settings.hidden
    actor = nn.Sequential(
        nn.Linear(STATE_SIZE, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(),
        nn.Linear(h, N_CONFIGS * N_CONFIGS),
    )  # fmt: skip
    critic = nn.Sequential(nn.Linear(STATE_SIZE, h), nn.Tanh(), nn.Linear(h, 1))
    with torch.no_grad():
        last = actor[-1]
        last.weight.mul_(0.01)
        # start near "stay": the static configuration CEDF is compared with
        last.bias.copy_(torch.eye(N_CONFIGS).flatten() * settings.stay_bias)
    return actor, critic


def export(actor, meta: dict) -> Controller:
    """The actor's weights as the numpy controller."""
    layers = [m for m in actor if hasattr(m, "weight")]
    w = {}
    for name, lay in zip(("1", "2", "a"), layers):
        w["w" + name] = lay.weight.detach().double().numpy().T.copy()
        w["b" + name] = lay.bias.detach().double().numpy().copy()
    return Controller(w, dict(meta))


def save_npz(ctrl: Controller, path: Path) -> None:
    """Write the controller (float32, with its metadata) for ``Controller.load``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: v.astype(np.float32) for k, v in ctrl.weights.items()}
    for k, v in ctrl.meta.items():
        arrays["meta_" + k] = np.asarray(v)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)


def _gae(rewards, values, gamma, lam):
    adv = np.zeros(len(rewards))
    last = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        nxt = values[t + 1] if t + 1 < len(values) else 0.0
        delta = rewards[t] + gamma * nxt - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + np.asarray(values)


def train(
    settings: TrainSettings,
    out: Path,
    progress: Callable[[int, dict], None] | None = None,
    *,
    resume: bool = False,
) -> list[dict]:
    """Train, saving ``out`` (the best controller by mean ET ratio, numpy), checkpoints
    beside it every ``save_every`` iterations, and the reward curve (``*.csv``). Returns
    one record per iteration. ``resume``: go on from ``OUT-state.pt`` (the last
    checkpoint of a run with the same settings, up to ``iterations``) to
    ``settings.iterations``, as if the run had not stopped: training in stages."""
    import torch

    torch.set_num_threads(1)
    actor, critic = _net(settings)
    opt = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=settings.lr)
    meta = {"settings": json.dumps(asdict(settings))}
    run = _Run()
    if resume:
        run = _resume(out, settings, actor, critic, opt)
    t0 = time.perf_counter() - run.wall_s
    for it in range(run.done, settings.iterations):
        ctrl = export(actor, meta)
        rolls = [
            run_episode(ctrl, settings, TRAIN_SEED0 + settings.seed * 100_000 + it * settings.episodes + e)
            for e in range(settings.episodes)
        ]  # fmt: skip
        stats = _update(actor, critic, opt, rolls, settings)
        run.jobs += sum(r.jobs for r in rolls)
        rec = {
            "iteration": it + 1,
            "days": (it + 1) * settings.episodes,
            "jobs": run.jobs,
            "return": float(np.mean([sum(r.rewards) for r in rolls])),
            "et_ratio": float(np.mean([r.et_ratio for r in rolls])),
            "repartitions": float(np.mean([r.repartitions for r in rolls])),
            "wall_s": time.perf_counter() - t0,
            **stats,
        }
        run.curve.append(rec)
        if -rec["et_ratio"] > run.best:
            run.best = -rec["et_ratio"]
            meta_best = {**meta, "iteration": it + 1, "et_ratio": rec["et_ratio"]}
            save_npz(export(actor, meta_best), out)
        if (it + 1) % settings.save_every == 0 or it + 1 == settings.iterations:
            save_npz(
                export(actor, {**meta, "iteration": it + 1}),
                out.with_name(f"{out.stem}-it{it + 1:04d}.npz"),
            )
            run.done, run.wall_s = it + 1, rec["wall_s"]
            _save_state(out, settings, actor, critic, opt, run)
            write_curve(run.curve, out.with_suffix(".csv"))
        if progress is not None:
            progress(it, rec)
    write_curve(run.curve, out.with_suffix(".csv"))
    return run.curve


@dataclass
class _Run:
    """Where a training run stands: iterations done, the reward curve, the best score
    (minus the ET ratio), jobs simulated and seconds spent (what a resume needs)."""

    done: int = 0
    curve: list[dict] = field(default_factory=list)
    best: float = -math.inf
    jobs: int = 0
    wall_s: float = 0.0


def state_path(out: Path) -> Path:
    """The torch state a run writes beside ``out`` at each checkpoint."""
    return out.with_name(f"{out.stem}-state.pt")


def _stage_settings(settings: TrainSettings) -> dict:
    """The settings a resumed run must share with the one it continues (all but how far
    it goes and how often it saves)."""
    return {k: v for k, v in asdict(settings).items() if k not in ("iterations", "save_every")}


def _save_state(out: Path, settings: TrainSettings, actor, critic, opt, run: _Run) -> None:
    import torch

    path = state_path(out)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {
            "actor": actor.state_dict(),
            "critic": critic.state_dict(),
            "opt": opt.state_dict(),
            "iteration": run.done,
            "settings": _stage_settings(settings),
            "run": asdict(run),
        },
        tmp,
    )
    tmp.replace(path)


def _resume(out: Path, settings: TrainSettings, actor, critic, opt) -> _Run:
    """Load ``OUT-state.pt`` into the networks and the optimiser; ValueError naming the
    fix when there is none, it is of other settings, or it is already as far."""
    import torch

    path = state_path(out)
    if not path.is_file():
        raise ValueError(f"--resume: no {path} (a run with --out {out} writes it)")
    try:
        state = torch.load(path, weights_only=False)
    except Exception as exc:  # a truncated or foreign file
        raise ValueError(f"--resume: {path} is not a training state: {exc}") from None
    if "run" not in state or state.get("settings") != _stage_settings(settings):
        raise ValueError(
            f"--resume: {path} is of another run (other settings, or written before "
            "resuming was possible); resume with the options it was trained with"
        )
    if state["iteration"] >= settings.iterations:
        raise ValueError(
            f"--resume: {path} is already at iteration {state['iteration']}; give "
            f"--iterations above it"
        )
    actor.load_state_dict(state["actor"])
    critic.load_state_dict(state["critic"])
    opt.load_state_dict(state["opt"])
    return _Run(**state["run"])


def _update(actor, critic, opt, rolls: list[Rollout], s: TrainSettings) -> dict:
    import torch

    states, before, after, support, logp, adv, ret = [], [], [], [], [], [], []
    with torch.no_grad():
        for r in rolls:
            if not r.states:
                continue
            st = torch.as_tensor(np.stack(r.states), dtype=torch.float32)
            v = critic(st).squeeze(-1).numpy()
            a, g = _gae(r.rewards, list(v), s.gamma, s.lam)
            states.append(st)
            before.append(np.asarray(r.before) - 1)
            after.append(np.asarray(r.after) - 1)
            support.append(np.stack(r.support))
            logp.append(np.stack(r.logp))
            adv.append(a)
            ret.append(g)
    if not states:
        return {"loss": math.nan}
    S = torch.cat(states)
    B = torch.as_tensor(np.concatenate(before), dtype=torch.long)
    A = torch.as_tensor(np.concatenate(after), dtype=torch.long)
    M = torch.as_tensor(np.concatenate(support))
    LP = torch.as_tensor(np.concatenate(logp), dtype=torch.float32)
    ADV = torch.as_tensor(np.concatenate(adv), dtype=torch.float32)
    RET = torch.as_tensor(np.concatenate(ret), dtype=torch.float32)
    ADV = (ADV - ADV.mean()) / (ADV.std() + 1e-8)
    n = S.shape[0]
    g = torch.Generator().manual_seed(s.seed)
    last = {}
    for _ in range(s.epochs):
        perm = torch.randperm(n, generator=g)
        for i in range(0, n, s.minibatch):
            idx = perm[i : i + s.minibatch]
            logits = actor(S[idx]).view(-1, N_CONFIGS, N_CONFIGS)
            rows = logits.gather(1, B[idx].unsqueeze(-1).expand(-1, -1, N_CONFIGS))
            rows = rows.masked_fill(~M[idx], -1e9)
            logprob = torch.log_softmax(rows, dim=-1)
            new = logprob.gather(2, A[idx].unsqueeze(-1)).squeeze(-1)
            ratio = torch.exp(new - LP[idx])
            adv_i = ADV[idx].unsqueeze(-1)
            pl = -torch.min(ratio * adv_i, ratio.clamp(1 - s.clip, 1 + s.clip) * adv_i).mean()
            probs = logprob.exp()
            ent = -(probs * logprob.masked_fill(~M[idx], 0.0)).sum(-1).mean()
            vl = ((critic(S[idx]).squeeze(-1) - RET[idx]) ** 2).mean()
            loss = pl + s.value_coef * vl - s.entropy * ent
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([*actor.parameters(), *critic.parameters()], 0.5)
            opt.step()
            last = {
                "loss": loss.item(),
                "policy_loss": pl.item(),
                "value_loss": vl.item(),
                "entropy": ent.item(),
            }
    return {**last, "steps": n}


def write_curve(curve: list[dict], path: Path) -> None:
    """The reward curve as CSV (one row per iteration)."""
    if not curve:
        return
    keys = list(curve[0])
    lines = [",".join(keys)]
    for rec in curve:
        lines.append(",".join("" if rec[k] is None else f"{rec[k]}" for k in keys))
    path.write_text("\n".join(lines) + "\n")


def plot_curve(curve: list[dict], path: Path) -> Path:
    """The reward curve (mean day return per iteration, and ET against static CEDF)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["days"] for r in curve]
    y = [r["return"] for r in curve]
    ratio = [r["et_ratio"] for r in curve]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, y, color="tab:blue", alpha=0.4, label="return per iteration")
    w = max(1, len(y) // 10)
    smooth = np.convolve(y, np.ones(w) / w, mode="valid") if len(y) >= w else y
    ax.plot(x[w - 1 :], smooth, color="tab:blue", label=f"moving mean ({w})")
    ax.axhline(-100.0, color="gray", ls="--", lw=1, label="static CEDF (-100)")
    ax.set_xlabel("simulated days")
    ax.set_ylabel("return (-ET / ET of static CEDF x 100)")
    ax2 = ax.twinx()
    ax2.plot(x, ratio, color="tab:red", alpha=0.3)
    ax2.set_ylabel("ET / ET(CEDF)", color="tab:red")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("SMART-MIG controller training (PPO, smart-mig workload at 20x, 8 A100)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
