"""`retarget demo`: train DP models, retarget them through the HTTP API, report the frontier.

1. Train logistic regressions and small MLPs with Opacus on the digits' train
   split (three or more privacy settings each, as in appendix H.1 of the paper),
   once per seed (three seeds, every run with its own randomness), and one run
   saved at several epochs (H.3).
2. Start the service on its embedded defaults (SQLite, a local blob folder,
   in-process accounting) in a fresh folder, and register the dataset, its public
   validation split and every model through the HTTP API.
3. For targets between the input models' epsilons, for each seed's models: plan and
   release RS and LC under RDP and PLD, download each release and score it on the
   1,000 held-out test examples; ask the service what each LC release's weights prove
   under the other accountant.
4. Checkpoints of one run: RS works, LC is refused with its reason, and their
   average costs exactly the latest checkpoint's guarantee.
5. Write ``report.md`` (headline, mean and spread over seeds, every release),
   ``report.json``, one ``frontier-<family>.svg`` per family, and the dashboard key.
"""

from __future__ import annotations

import logging
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.torch import save

from retarget.client import RetargetClient as Client
from service.demo.data import Digits, Split, load_digits_splits
from service.demo.oracle import oracle_accuracy
from service.demo.releasing import (
    check_claims,
    checkpoint_run,
    other_accountant,
    release_and_score,
)
from service.demo.report import write_report
from service.demo.results import Dashboard, DemoOptions, DemoResult, Progress
from service.demo.train import TrainConfig, TrainedModel, train


class LocalService:
    """The service on its embedded defaults, served by uvicorn in a thread."""

    def __init__(self, data_dir: Path) -> None:
        import uvicorn

        from service.api.app import create_app
        from service.config import Settings
        from service.registry import keys
        from service.registry.db import make_engine, make_sessionmaker, session_scope
        from service.registry.migrate import upgrade

        settings = Settings(data_dir=data_dir, database_url=None, redis_url=None)
        data_dir.mkdir(parents=True, exist_ok=True)
        upgrade(url=settings.resolved_database_url)
        engine = make_engine(settings.resolved_database_url)
        with session_scope(make_sessionmaker(engine)) as session:
            _, self.key = keys.create_key(session=session, name="demo", scopes=["admin"])
        engine.dispose()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LocalService:
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            time.sleep(0.05)
        raise RuntimeError("the service did not start")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def split_bytes(split: Split) -> bytes:
    return save({"inputs": split.inputs, "labels": split.labels})


def run_demo(options: DemoOptions, progress: Progress = print) -> DemoResult:
    started = time.perf_counter()
    result = DemoResult(options)
    out = options.out
    data = load_digits_splits()
    result.split = {
        "train": len(data.train.labels),
        "validation": len(data.validation.labels),
        "test": len(data.test.labels),
    }
    progress(
        f"digits: {len(data.train.labels)} train (private), {len(data.validation.labels)} "
        f"validation (public), {len(data.test.labels)} test"
    )
    trained = _train_all(options, data, out / "models", progress)
    service_dir = out / "service-data"
    shutil.rmtree(service_dir, ignore_errors=True)
    with LocalService(service_dir) as service:
        progress(f"service on {service.url} (SQLite and blobs in {service_dir})")
        api = Client(service.url, service.key)
        dataset = api.datasets.create(
            "digits", metric="val_accuracy", description="sklearn digits"
        ).model_dump()
        api.datasets.set_validation(dataset["id"], split_bytes(data.validation))
        ids = _register(api, dataset["id"], trained, options, progress, result)
        for family in options.families:
            _frontier(api, dataset["id"], family, ids, data, options, progress, result)
        checkpoint_run(api, dataset["id"], ids, data, options, progress, result)
        result.dashboard = _dashboard_access(service, out)
    result.checks = check_claims(result)
    result.seconds = time.perf_counter() - started
    write_report(result, out)
    progress(f"wrote {out / 'report.md'} ({result.seconds:.0f} s)")
    _show_dashboard_access(result.dashboard, progress)
    return result


def _dashboard_access(service: LocalService, out: Path) -> Dashboard:
    """Save the run's admin key beside the report (readable by the user only) and say
    how to serve the demo's data and log in to the dashboard."""
    data_dir = (out / "service-data").resolve()
    key_file = out.resolve() / "dashboard-key.txt"
    key_file.unlink(missing_ok=True)
    key_file.touch(mode=0o600)
    key_file.write_text(service.key + "\n")
    return Dashboard(
        data_dir=str(data_dir),
        key=service.key,
        key_file=str(key_file),
        command=f"RETARGET_DATA_DIR={data_dir} retarget serve --port 8000",
        url="http://127.0.0.1:8000/admin/login",
    )


def _show_dashboard_access(dashboard: Dashboard | None, progress: Progress) -> None:
    if dashboard is None:
        return
    progress("to browse this run in the dashboard:")
    progress(f"  {dashboard.command}")
    progress(f"  open {dashboard.url} and log in with the admin key {dashboard.key}")
    progress(f"  (the key is also in {dashboard.key_file}, readable by you only)")


def _train_all(
    options: DemoOptions, data: Digits, folder: Path, progress: Progress
) -> dict[str, list[TrainedModel]]:
    """Every run gets its own seed: LC's bound assumes that different runs drew their
    sampling masks and noise independently (one seed shared by the settings of a family
    would give them the same masks and the same standard normals)."""
    trained: dict[str, list[TrainedModel]] = {}
    configs = [
        (
            family,
            TrainConfig(
                f"{family}-s{s:g}-c{c:g}-seed{seed}",
                family,
                s,
                c,
                epochs=options.epochs,
                seed=1000 * seed + 10 * f + i,
                repetition=seed,
            ),
        )
        for seed in options.seeds
        for f, family in enumerate(options.families)
        for i, (s, c) in enumerate(options.settings)
    ]
    run = TrainConfig(
        "mlp-run",
        "mlp",
        options.settings[0][0],
        options.settings[0][1],
        epochs=max(options.checkpoint_epochs),
        checkpoint_epochs=options.checkpoint_epochs,
        seed=7,
    )
    configs.append(("checkpoints", run))
    progress(
        f"training {len(configs)} DP-SGD runs with Opacus (Poisson sampling, plain SGD): "
        f"{len(options.families)} famil{'y' if len(options.families) == 1 else 'ies'} x "
        f"{len(options.settings)} settings x {len(options.seeds)} seeds, and one run saved "
        f"after epochs {', '.join(map(str, options.checkpoint_epochs))}"
    )
    shown: set[str] = set()  # library notices already shown in this demo
    for i, (group, cfg) in enumerate(configs, 1):
        progress(f"[{i}/{len(configs)}] {cfg.name}")
        trained.setdefault(group, []).extend(
            train(cfg, data.train, data.validation, data.test, folder, progress, shown)
        )
    return trained


def _register(
    api: Client,
    dataset_id: str,
    trained: dict[str, list[TrainedModel]],
    options: DemoOptions,
    progress: Progress,
    result: DemoResult,
) -> dict[str, list[dict[str, Any]]]:
    ids: dict[str, list[dict[str, Any]]] = {}
    count = sum(len(v) for v in trained.values())
    done = 0
    for group, models in trained.items():
        for m in models:
            meta = dict(m.metadata)  # lineage, metrics, architecture: passed through
            created = api.models.register(
                m.path,
                dataset_id=dataset_id,
                name=meta.pop("name"),
                mechanism=meta.pop("mechanism"),
                extra=meta,
            ).model_dump()
            eps = api.models.epsilon(created["id"], delta=options.delta, accountant="rdp").epsilon
            eps_pld = api.models.epsilon(
                created["id"], delta=options.delta, accountant="pld"
            ).epsilon
            done += 1
            progress(
                f"  registered [{done}/{count}] {m.name}: epsilon {eps_pld:.3f} (PLD), "
                f"{eps:.3f} (RDP) at delta {options.delta:g}"
            )
            entry = {
                "id": created["id"],
                "name": m.name,
                "family": group,
                "epsilon_rdp": eps,
                "epsilon_pld": eps_pld,
                "val_accuracy": m.metadata["metrics"]["val_accuracy"],
                "test_accuracy": m.test_accuracy,
                "noise_multiplier": m.metadata["mechanism"]["noise_multiplier"],
                "clipping_norm": m.metadata["mechanism"]["clipping_norm"],
                "steps": m.metadata["mechanism"]["steps"],
                "mechanism": m.metadata["mechanism"],
                "seed": m.extra.get("repetition"),
            }
            ids.setdefault(group, []).append(entry)
            result.inputs.append(entry)
    return ids


def _targets(models: list[dict[str, Any]], count: int) -> list[float]:
    """``count`` targets spread between the most and the least private model's epsilon
    (PLD), on a log scale, rounded to 3 significant digits."""
    lo = min(m["epsilon_pld"] for m in models)
    hi = max(m["epsilon_pld"] for m in models)
    grid = np.geomspace(lo, hi, count + 2)[1:-1]
    return [float(f"{t:.3g}") for t in grid]


def _frontier(
    api: Client,
    dataset_id: str,
    family: str,
    ids: dict[str, list[dict[str, Any]]],
    data: Digits,
    options: DemoOptions,
    progress: Progress,
    result: DemoResult,
) -> None:
    models = ids[family]
    by_id = {m["id"]: m for m in models}
    # every repetition trains the same mechanisms: the same epsilons, the same targets
    targets = _targets(models, options.targets)
    progress(f"{family}: retargeting to epsilon {', '.join(f'{t:g}' for t in targets)}")
    # RS by the noise objective: the models' validation accuracy is a function of the
    # private models, so a selection read from it would cost their joint release
    combos = [
        ("rs", "rdp", "signal"),
        ("rs", "pld", "signal"),
        ("lc", "rdp", "signal"),
        ("lc", "pld", "signal"),
    ]
    validation_at = (
        set(targets[-options.validation_targets :]) if options.validation_targets else set()
    )
    for seed in options.seeds:
        group = [m["id"] for m in models if m["seed"] == seed]
        progress(f" seed {seed}: {len(group)} models")
        for target in targets:
            plans = list(combos)
            if target in validation_at:
                plans.append(("lc", "best", "validation"))
            for method, acc, objective in plans:
                request = {
                    "dataset_id": dataset_id,
                    "epsilon": target,
                    "delta": options.delta,
                    "method": method,
                    "accountant": acc,
                    "objective": objective,
                    "model_ids": group,
                }
                row = release_and_score(api, request, family, seed, by_id, data, progress, result)
                if row is not None and method == "lc" and objective == "signal":
                    row.other_accountant_epsilon = other_accountant(api, request, row)
            _default_against_oracle(
                api, dataset_id, family, seed, target, group, by_id, data, options, progress, result
            )


def _default_against_oracle(
    api: Client,
    dataset_id: str,
    family: str,
    seed: int,
    target: float,
    group: list[str],
    by_id: dict[str, dict[str, Any]],
    data: Digits,
    options: DemoOptions,
    progress: Progress,
    result: DemoResult,
) -> None:
    """The default plan (no method, no objective: what a new user gets) released and
    scored, against the oracle of ``service.demo.oracle`` (test labels: report only)."""
    request = {
        "dataset_id": dataset_id,
        "epsilon": target,
        "delta": options.delta,
        "model_ids": group,
    }
    row = release_and_score(api, request, family, seed, by_id, data, progress, result)
    if row is not None:  # reported in its own table (report.regret_section), not the frontier's
        result.rows.remove(row)
    oracle = oracle_accuracy([by_id[m] for m in group], target, options.delta)
    default = None
    if row is not None:
        default = (
            row.expected_test_accuracy
            if row.expected_test_accuracy is not None
            else row.test_accuracy
        )
    # what a key without scope 'publish' (or a dataset without a split) gets: 'signal'
    signal = next(
        (
            r.expected_test_accuracy
            for r in result.rows
            if (r.family, r.seed, r.target, r.method, r.accountant, r.objective)
            == (family, seed, target, "rs", "pld", "signal")
        ),
        None,
    )
    result.regret.append(
        {
            "signal": signal,
            "family": family,
            "seed": seed,
            "target": target,
            "default": default,
            "oracle": oracle,
            "method": row.method if row is not None else "-",
            "objective": row.objective if row is not None else "-",
            "weights": {by_id[m]["name"]: w for m, w in row.weights.items()} if row else {},
        }
    )
    if default is not None and oracle is not None:
        progress(f"  default plan at {target:g}: {default:.3f}, oracle {oracle:.3f}")


def main(out: Path, quick: bool = False, progress: Progress = print) -> int:
    options = DemoOptions(out=out)
    if quick:
        options = DemoOptions(
            out=out,
            seeds=(1, 2, 3),
            families=("logreg",),
            settings=((0.8, 1.0), (1.5, 1.0), (3.0, 1.0)),
            epochs=2,
            checkpoint_epochs=(1, 2),
            targets=2,
            validation_targets=1,
        )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    result = run_demo(options, progress)
    failed = [name for name, ok in result.checks.items() if not ok]
    for name, ok in result.checks.items():
        progress(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 1 if failed else 0
