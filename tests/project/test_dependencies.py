"""pyproject.toml and requirements/test.txt agree, and the test extra resolves with plain pip.

The lock (requirements/test.txt, what scripts/test.sh installs) pins a version of every package
gyreflow and its test extra name, inside each bound pyproject.toml gives. The test extra names no
package whose version must follow another's: boto3 must match the botocore that aiobotocore (under
s3fs) pins, and a bound of our own on boto3 sent pip's resolver to the newest boto3 first and
ended in ``ResolutionImpossible`` (moto brings boto3 at a version pip finds).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def locked() -> dict[str, list[tuple[str, str]]]:
    """name -> [(version, marker text)] of requirements/test.txt."""
    pins: dict[str, list[tuple[str, str]]] = {}
    for line in (REPO / "requirements" / "test.txt").read_text(encoding="utf-8").splitlines():
        if not line or line.startswith((" ", "#")):
            continue
        requirement, _, marker = line.partition(";")
        name, _, version = requirement.strip().partition("==")
        pins.setdefault(canonicalize_name(name.split("[")[0]), []).append(
            (version, marker.strip()))
    return pins


def test_the_lock_pins_every_requirement_within_its_bounds():
    pins = locked()
    environment = {**default_environment(), "python_full_version": "3.11.7",
                   "python_version": "3.11", "sys_platform": "linux"}
    wanted = [*project()["dependencies"], *project()["optional-dependencies"]["test"]]
    outside = []
    for text in wanted:
        requirement = Requirement(text)
        versions = [version for version, marker in pins.get(canonicalize_name(requirement.name), [])
                    if not marker or Requirement(f"x; {marker}").marker.evaluate(environment)]
        if len(versions) != 1 or versions[0] not in requirement.specifier:
            outside.append((text, versions))
    assert outside == []


def test_the_test_extra_leaves_boto3_to_moto():
    names = [canonicalize_name(Requirement(text).name)
             for text in project()["optional-dependencies"]["test"]]
    assert "boto3" not in names and "botocore" not in names
    assert "moto" in names and "s3fs" in names


def test_pyarrow_is_a_dependency_of_gyreflow_itself():
    core = {canonicalize_name(Requirement(text).name): text for text in project()["dependencies"]}
    assert core["pyarrow"] == "pyarrow>=14"
