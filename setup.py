"""The build step pyproject.toml cannot say: the top-level Alembic folder `migrations/`
ships inside the server package (as ``service/migrations/``), so an installed wheel
migrates from any folder (``service.registry.migrate`` looks there first, then beside
the package in a source checkout)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithMigrations(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "service" / "migrations"
        shutil.copytree(
            HERE / "migrations",
            target,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            dirs_exist_ok=True,
        )


setup(cmdclass={"build_py": BuildWithMigrations})
