"""Step time of real PyTorch steps on the CPU without the memory probe, with the probe's
hooks only (tracking switched off by the control file: outside the forecasting window) and
with live-tensor tracking on (inside it, and always under an emulated capacity).

An empty dispatch mode is measured beside them: most of the tracking cost is PyTorch's own
Python dispatch of every op, which any TorchDispatchMode pays.

Step time is the process's CPU time (``time.process_time``, one torch thread, the probe's
timer thread included). The settings are interleaved round by round and each overhead is
the median over rounds of the paired ratio (setting / no probe in the same round), so a
shared machine's drifting load cancels. Outside the forecasting window the overhead is
below that noise, so it is also computed from the cost of the hooks themselves: the
per-step boundary (optimizer hook) and the global forward hooks per module call (they stay
only in scripts without an optimizer), times the calls per step.

    python benchmarks/probe_overhead.py [--rounds 9] [--steps 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch.nn.modules.module import register_module_forward_pre_hook  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from slurm_mig.memory.probe import Probe, ProbeConfig  # noqa: E402

SETTINGS = ("no probe", "hooks only", "tracking", "empty mode")


class EmptyMode(TorchDispatchMode):
    """A dispatch mode that only calls the op: PyTorch's own cost of a Python mode."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def cnn_train() -> Callable[[], None]:
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def mlp_train() -> Callable[[], None]:
    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, 256), torch.randint(0, 10, (256,))

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def transformer_infer() -> Callable[[], None]:
    layers = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(128, 4, 512, batch_first=True), num_layers=2
    ).eval()
    x = torch.randn(8, 64, 128)

    def step() -> None:
        with torch.no_grad():
            layers(x)

    return step


WORKLOADS = {
    "cnn-train": cnn_train,
    "mlp-train": mlp_train,
    "transformer-infer": transformer_infer,
}


def time_steps(step: Callable[[], None], steps: int) -> float:
    """Median CPU seconds of one step over ``steps`` steps (after 3 warm-up steps)."""
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        t = time.process_time()
        step()
        times.append(time.process_time() - t)
    return statistics.median(times)


def one_round(step: Callable[[], None], setting: str, steps: int, folder: Path) -> float:
    if setting == "no probe":
        return time_steps(step, steps)
    if setting == "empty mode":
        with EmptyMode():
            return time_steps(step, steps)
    control = folder / "control"
    control.write_text("off\n" if setting == "hooks only" else "on\n")
    probe = Probe(ProbeConfig(out=folder / "probe.csv", control=control)).install()
    try:
        return time_steps(step, steps)
    finally:
        probe.close()


def module_calls(step: Callable[[], None]) -> tuple[int, bool]:
    """(module forward calls per step, whether an optimizer steps)."""
    calls, stepped = [0], [False]

    def count(module, args):
        calls[0] += 1

    def opt_hook(opt, args, kwargs):
        stepped[0] = True

    h1 = register_module_forward_pre_hook(count)
    h2 = register_optimizer_step_post_hook(opt_hook)
    try:
        step()
    finally:
        h1.remove()
        h2.remove()
    return calls[0], stepped[0]


def hook_costs(folder: Path, n: int = 20000) -> dict[str, float]:
    """CPU seconds per optimizer-step boundary and per module call, tracking off."""
    control = folder / "control"
    control.write_text("off\n")
    module = nn.Identity()
    x = torch.zeros(1)

    def calls() -> float:
        t = time.process_time()
        for _ in range(n):
            module(x)
        return (time.process_time() - t) / n

    bare = min(calls() for _ in range(5))
    probe = Probe(ProbeConfig(out=folder / "probe.csv", control=control)).install()
    try:
        hooked = min(calls() for _ in range(5))
        best = []
        for _ in range(5):
            t = time.process_time()
            for _ in range(n):
                probe._on_optimizer_step(None, (), {})
            best.append((time.process_time() - t) / n)
    finally:
        probe.close()
    return {"per_boundary": min(best), "per_module_call": max(0.0, hooked - bare)}


def measure(rounds: int, steps: int) -> dict[str, dict[str, float]]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        costs = hook_costs(Path(tmp))
        for name, make in WORKLOADS.items():
            step = make()
            per: dict[str, list[float]] = {s: [] for s in SETTINGS}
            for r in range(rounds):
                order = SETTINGS if r % 2 == 0 else SETTINGS[::-1]
                for setting in order:
                    per[setting].append(one_round(step, setting, steps, Path(tmp)))
            base = statistics.median(per["no probe"])
            calls, optimizer = module_calls(step)
            hooks = costs["per_boundary"] + (0 if optimizer else calls * costs["per_module_call"])
            results[name] = {
                "no_probe_s": base,
                "hooks_only_pct": 100 * (statistics.median(_ratios(per, "hooks only")) - 1),
                "tracking_pct": 100 * (statistics.median(_ratios(per, "tracking")) - 1),
                "tracking_s": statistics.median(per["tracking"]),
                "empty_mode_pct": 100 * (statistics.median(_ratios(per, "empty mode")) - 1),
                "module_calls": calls,
                "hooks_per_step_s": hooks,
                "hooks_pct_from_costs": 100 * hooks / base,
            }
        results["_costs"] = costs
    return results


def _ratios(per: dict[str, list[float]], setting: str) -> list[float]:
    return [a / b for a, b in zip(per[setting], per["no probe"])]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    results = measure(args.rounds, args.steps)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"probe overhead: CPU time per step, torch {torch.__version__}, 1 thread, "
        f"median of {args.rounds} rounds of {args.steps} steps"
    )
    costs = results.pop("_costs")
    print(
        f"hook costs, tracking off: {costs['per_boundary'] * 1e6:.1f} us per iteration boundary, "
        f"{costs['per_module_call'] * 1e6:.2f} us per module call (forward hooks)"
    )
    print(
        f"{'workload':<18} {'no probe':>9} {'tracking':>9} {'tracking':>9} {'empty mode':>11} "
        f"{'hooks only':>11} {'hooks only':>11}"
    )
    print(
        f"{'':<18} {'ms/step':>9} {'ms/step':>9} {'measured':>9} {'measured':>11} "
        f"{'measured':>11} {'from costs':>11}"
    )
    for name, r in results.items():
        print(
            f"{name:<18} {r['no_probe_s'] * 1e3:9.2f} {r['tracking_s'] * 1e3:9.2f} "
            f"{r['tracking_pct']:+8.1f}% {r['empty_mode_pct']:+10.1f}% "
            f"{r['hooks_only_pct']:+10.1f}% {r['hooks_pct_from_costs']:+10.2f}%"
        )
    print(
        "tracking: the probe's live-tensor dispatch mode (inside the forecasting window, and "
        "always with --emulate); empty mode: a dispatch mode that does nothing (PyTorch's "
        "own share of that cost); hooks only: the probe outside the window"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
