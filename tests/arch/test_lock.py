"""The development and CI lock (constraints-py311.txt) agrees with setup.cfg and the venv.

``make demo`` and ``make test`` install with the lock as pip constraints, so a fresh clone
gets the versions the suite passed with. These checks keep it honest: every requirement of
the extras ``make test`` installs is locked at a version its range allows (nothing missing),
every locked package is needed by one of them (nothing stale), and the environment running
the tests holds exactly the locked versions (what ``pip freeze`` would show).
"""

from __future__ import annotations

import configparser
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "constraints-py311.txt"
TOOLS = {"pip", "setuptools", "wheel"}
"""Installed into every venv by the Makefile or venv itself: locked, but no extra names them."""


def lock() -> dict[str, Version]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def extras() -> list[str]:
    match = re.search(r"^EXTRAS := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, "the Makefile names the extras make test installs as EXTRAS := a,b,c"
    return match.group(1).split(",")


def roots() -> list[Requirement]:
    """The project's own requirements: install_requires and the extras make test installs."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    text = cfg["options"]["install_requires"]
    text += "".join("\n" + cfg["options.extras_require"][extra] for extra in extras())
    return [Requirement(line) for line in text.splitlines() if line.strip()]


def test_every_requirement_is_locked_in_its_range() -> None:
    pins = lock()
    missing = [str(r) for r in roots() if canonicalize_name(r.name) not in pins]
    assert not missing, f"not in {LOCK.name} (run make lock): {missing}"
    outside = [
        f"{r} (locked {pins[canonicalize_name(r.name)]})"
        for r in roots()
        if not r.specifier.contains(pins[canonicalize_name(r.name)], prereleases=True)
    ]
    assert not outside, f"locked outside setup.cfg's range (run make lock): {outside}"


def _needed() -> set[str]:
    """Every distribution the roots need, transitively, by the installed metadata."""
    environment = default_environment()
    todo = [(r, "") for r in roots()]
    seen: set[str] = set()
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({**environment, "extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(name) or []:
            child = Requirement(line)
            for wanted in requirement.extras or {""}:
                todo.append((child, wanted))
    return {key.split("[")[0] for key in seen}


def test_nothing_locked_is_stale() -> None:
    stale = sorted(lock().keys() - _needed() - TOOLS)
    assert not stale, f"locked but needed by no requirement of setup.cfg (run make lock): {stale}"


def test_the_environment_holds_the_locked_versions() -> None:
    installed = {
        canonicalize_name(d.metadata["Name"]): Version(d.version) for d in metadata.distributions()
    }
    differ = [
        f"{name}: locked {version}, installed {installed.get(name, 'nothing')}"
        for name, version in sorted(lock().items())
        if name not in installed or Version(installed[name].public) != version
    ]
    if differ and not LOCK.exists():
        pytest.fail(f"{LOCK} is missing")
    assert not differ, f"the venv is not the lock (make install reinstalls it): {differ}"
