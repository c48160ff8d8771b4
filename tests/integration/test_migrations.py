"""The schema comes from Alembic alone, and the migrations match the models."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError

from service.registry.db import make_engine
from service.registry.migrate import alembic_config, upgrade
from service.registry.models import Base


def _diff(engine: Engine) -> list:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))


def test_postgres_schema_matches_models_after_upgrade(postgres_engine: Engine) -> None:
    assert _diff(postgres_engine) == []


def test_sqlite_schema_matches_models_and_upgrade_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url=url)
    upgrade(url=url)
    engine = make_engine(url)
    try:
        assert {"datasets", "models", "alembic_version"} <= set(inspect(engine).get_table_names())
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_postgres_upgrade_is_idempotent(postgres_url: str, postgres_engine: Engine) -> None:
    upgrade(url=postgres_url)
    assert _diff(postgres_engine) == []


def test_lineage_verified_is_false_for_rows_registered_before_the_check(tmp_path: Path) -> None:
    """0007 adds models.lineage_verified: old rows stay unverified; downgrade removes it."""
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    command.upgrade(alembic_config(url=url), "0006")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO datasets (id, name, created_at) VALUES ('d', 'old', "
                    "'2026-01-01 00:00:00')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO models (id, dataset_id, name, version, mechanism, "
                    "mechanism_type, mechanism_hash, lineage_run_id, lineage_step, signature, "
                    "signature_hash, sha256, size_bytes, metrics, created_at) VALUES ('m', 'd', "
                    "'m', 1, '{}', 'dp_sgd', 'h', 'r', 5, '{}', 's', 'x', 1, '{}', "
                    "'2026-01-01 00:00:00')"
                )
            )
        upgrade(url=url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT lineage_verified FROM models")).scalar_one() in (
                0,
                False,
            )
        assert _diff(engine) == []
        command.downgrade(alembic_config(url=url), "0006")
        assert "lineage_verified" not in {c["name"] for c in inspect(engine).get_columns("models")}
        upgrade(url=url)
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_0010_keeps_one_verified_checkpoint_per_run_step(tmp_path: Path) -> None:
    """Verified duplicates of a (run, step) from before 0010: the earliest stays verified,
    the others become independent models; then the unique index holds; downgrade drops it."""
    url = f"sqlite:///{tmp_path / 'dup.sqlite'}"
    command.upgrade(alembic_config(url=url), "0009")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO datasets (id, name, created_at) VALUES ('d', 'old', "
                    "'2026-01-01 00:00:00')"
                )
            )
            for mid, when in (("b", "02"), ("a", "01"), ("c", "03")):
                conn.execute(
                    text(
                        "INSERT INTO models (id, dataset_id, name, version, mechanism, "
                        "mechanism_type, mechanism_hash, lineage_run_id, lineage_step, "
                        "lineage_verified, signature, signature_hash, sha256, size_bytes, "
                        "metrics, created_at) VALUES (:id, 'd', :id, 1, '{}', 'dp_sgd', 'h', "
                        "'r', 5, 1, '{}', 's', 'x', 1, '{}', :at)"
                    ),
                    {"id": mid, "at": f"2026-01-{when} 00:00:00"},
                )
        upgrade(url=url)
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT id, lineage_verified FROM models ORDER BY id")).all()
        assert [(m, bool(v)) for m, v in rows] == [("a", True), ("b", False), ("c", False)]
        assert _diff(engine) == []
        command.downgrade(alembic_config(url=url), "0009")
        assert "uq_models_run_step" not in {
            i["name"] for i in inspect(engine).get_indexes("models")
        }
    finally:
        engine.dispose()


def test_0014_marks_copies_of_a_datasets_bytes_and_keeps_the_earliest(tmp_path: Path) -> None:
    """Models registered twice with the same bytes before copies were refused: the
    earliest stays the original, the later ones point at it (``duplicate_of``), the same
    bytes in another dataset are not a copy; then the partial unique index holds, and
    downgrade removes the columns."""
    url = f"sqlite:///{tmp_path / 'copies.sqlite'}"
    command.upgrade(alembic_config(url=url), "0011")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for ds in ("d", "e"):
                conn.execute(
                    text(
                        "INSERT INTO datasets (id, name, created_at) VALUES (:id, :id, "
                        "'2026-01-01 00:00:00')"
                    ),
                    {"id": ds},
                )
            for mid, ds, sha, when in (
                ("b", "d", "x", "02"),
                ("a", "d", "x", "01"),
                ("c", "d", "x", "03"),
                ("u", "d", "y", "04"),
                ("o", "e", "x", "05"),
            ):
                conn.execute(
                    text(
                        "INSERT INTO models (id, dataset_id, name, version, mechanism, "
                        "mechanism_type, mechanism_hash, signature, signature_hash, sha256, "
                        "size_bytes, metrics, created_at) VALUES (:id, :ds, :id, 1, '{}', "
                        "'dp_sgd', 'h', '{}', 's', :sha, 1, '{}', :at)"
                    ),
                    {"id": mid, "ds": ds, "sha": sha, "at": f"2026-01-{when} 00:00:00"},
                )
        upgrade(url=url)
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT id, duplicate_of FROM models ORDER BY id")).all()
            assert dict(rows) == {"a": None, "b": "a", "c": "a", "o": None, "u": None}
            assert _diff(engine) == []
        with engine.begin() as conn:  # a second original of the same bytes: refused
            try:
                conn.execute(
                    text(
                        "INSERT INTO models (id, dataset_id, name, version, mechanism, "
                        "mechanism_type, mechanism_hash, signature, signature_hash, sha256, "
                        "size_bytes, metrics, created_at) VALUES ('z', 'd', 'z', 1, '{}', "
                        "'dp_sgd', 'h', '{}', 's', 'x', 1, '{}', '2026-01-09 00:00:00')"
                    )
                )
                raise AssertionError("a second original of the same bytes was stored")
            except IntegrityError:
                pass
        command.downgrade(alembic_config(url=url), "0011")
        columns = {c["name"] for c in inspect(engine).get_columns("models")}
        assert not {"duplicate_of", "metric_declarations"} & columns
    finally:
        engine.dispose()
