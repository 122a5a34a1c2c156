"""What pyproject.toml cannot say: ship the top-level ``migrations/`` inside the package.

Developers keep the Alembic scripts at the top of the repository; the wheel carries the same
files as ``bot/migrations`` (one copy in git), where :mod:`bot.store.migrate` looks first.
``[tool.setuptools.packages.find]`` cannot add a package mapped from another directory, so the
package list is made here: every directory under ``bot/``, as that find directive found them
(namespace packages included, so data-only directories such as ``bot/sim/profiles`` count as
packages and ship their files), plus the two mapped ones.
"""

from __future__ import annotations

from setuptools import find_namespace_packages, setup

MAPPED = {"bot.migrations": "migrations", "bot.migrations.versions": "migrations/versions"}

setup(
    packages=[*find_namespace_packages(include=["bot", "bot.*"]), *MAPPED],
    package_dir=MAPPED,
)
