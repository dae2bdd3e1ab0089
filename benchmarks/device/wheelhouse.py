"""The wheelhouse that a GPU machine with no package index needs to run this project's GPU kit.

What it carries: every distribution that the project (``pagesum``'s requirements and its ``hf``
extra's) and fairseq (``ve-fairseq``'s, less torch, torchaudio and the CUDA libraries: the
machine's own CUDA torch stays) need at run time, following the requirements down, that the
machine does not already have (``gpu_machine_packages.txt``), or has at a version seen there that a
requirement excludes (transformers); at the versions installed here, where the tests pass; as
cp312 manylinux wheels, or, for the few published only as source archives
(antlr4-python3-runtime 4.9.3, rouge-score 0.1.2), pure-Python wheels built here; and a wheel
of this project, built from the checkout. Never torch. At most 64 MiB in all: a build that
would exceed it stops with one line before anything is written.

``wheelhouse.lock.json`` pins every file by name, size and sha256, so that ``--dry-run`` says
what would be carried and how large it is without downloading anything, and a build checks
what it downloads. A build reuses the files of an earlier build that match the lock.

    python -m benchmarks.device.wheelhouse                # builds .wheelhouse/ (downloads)
    python -m benchmarks.device.wheelhouse --dry-run      # offline: checks the lock, sizes, builds only the project
    python -m benchmarks.device.wheelhouse --update-lock  # after setup.sh changed a version
"""

import argparse
import hashlib
import importlib.metadata as metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set

from packaging.requirements import Requirement

from benchmarks.commands import setup_keyword

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
LOCK = HERE / "wheelhouse.lock.json"
MACHINE_PACKAGES = HERE / "gpu_machine_packages.txt"
DEFAULT_DEST = REPO_ROOT / ".wheelhouse"
LIMIT_MIB = 64  # what one call to the GPU machine can carry, the checkout's other files aside
MIB = 2**20
PROJECT = "pagesum"
ROOTS = (PROJECT, "ve-fairseq")  # what the kit imports: the project, fairseq, and what they need
EXTRAS = ("hf",)  # the project's extras the GPU tests need: the transformers model's
NEVER = re.compile(r"^(torch|torchaudio|torchvision|triton|nvidia-.*)$")  # the machine's own CUDA stack
# The machine's interpreter, for the requirements' environment markers
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
          "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
          "platform_machine": "x86_64", "os_name": "posix", "extra": ""}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def project_sources(setup_py: Path) -> tuple:
    """Everything that ends up in the project's wheel, copied out of the checkout to build it
    (setuptools leaves a build/ folder beside the sources it builds, stale files and all):
    setup.py and every folder it installs a package from, ``pagesum_plugin`` and the values of
    its ``package_dir``, read from setup.py itself so that a package added there is carried too."""
    return ("setup.py", "pagesum_plugin", *sorted(setup_keyword(setup_py, "package_dir").values()))


@dataclass(frozen=True)
class Locked:
    """One carried distribution: the file downloaded (a wheel, or a source archive to build one
    from), its sha256 and size, and the size of the wheel that goes to the machine."""

    name: str
    version: str
    file: str
    sha256: str
    bytes: int
    wheel_bytes: int  # = bytes for a wheel; the built wheel's size for a source archive

    @property
    def source_only(self) -> bool:
        return not self.file.endswith(".whl")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_packages(path: Path = MACHINE_PACKAGES) -> Dict[str, Optional[str]]:
    """name -> the version seen on the machine (None where the list does not say) of every
    distribution its image has."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    pinned = [line.partition("==") for line in lines if line and not line.startswith("#")]
    return {canonical(name): version or None for name, _, version in pinned}


def runtime_needs(roots=ROOTS, present: Optional[Dict[str, Optional[str]]] = None) -> Dict[str, str]:
    """name -> version installed here, of every distribution that ``roots`` (the project with
    ``EXTRAS``) need at run time on the machine and that it lacks, or has at a version some
    requirement excludes (``present``: ``machine_packages``), requirements followed down; the
    roots included."""
    present = machine_packages() if present is None else present
    needs, queue = {}, [Requirement(root) for root in roots]
    while queue:
        requirement = queue.pop()
        name = canonical(requirement.name)
        seen = present.get(name)
        excluded = seen is not None and not requirement.specifier.contains(seen, prereleases=True)
        if name in needs or NEVER.match(name) or (name in present and name not in roots and not excluded):
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"wheelhouse: {name} is needed at run time but not installed here (run bash setup.sh)")
        needs[name] = distribution.version
        extras = ("", *EXTRAS) if name == PROJECT else ("",)
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or any(requirement.marker.evaluate({**TARGET, "extra": extra})
                                                 for extra in extras):
                queue.append(requirement)
    return needs


def read_lock(path: Path = LOCK) -> Dict[str, Locked]:
    return {entry["name"]: Locked(**entry) for entry in json.loads(path.read_text(encoding="utf-8"))}


def write_lock(entries: List[Locked], path: Path = LOCK) -> None:
    path.write_text(json.dumps([asdict(e) for e in sorted(entries, key=lambda e: e.name)], indent=1) + "\n",
                    encoding="utf-8")


def lock_problems(needs: Dict[str, str], lock: Dict[str, Locked]) -> List[str]:
    """How the lock disagrees with what is needed (the project itself is built, not locked)."""
    wanted = {name: version for name, version in needs.items() if name != PROJECT}
    problems = [f"{name}=={version} is needed but not locked" for name, version in wanted.items() if name not in lock]
    problems += [f"{name} is locked but not needed" for name in lock if name not in wanted]
    problems += [f"{name}: the lock has {lock[name].version}, this environment {version}"
                 for name, version in wanted.items() if name in lock and lock[name].version != version]
    return problems


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pip(*arguments: str, check: bool = True) -> bool:
    """pip of this interpreter, its output on stderr; a failure stops with pip's last line,
    or returns False when not ``check``."""
    result = subprocess.run([sys.executable, "-m", "pip", *arguments, "--disable-pip-version-check"],
                            stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0 and check:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"wheelhouse: pip {arguments[0]} failed: {last}")
    return result.returncode == 0


def project_wheel(dest: Path) -> Path:
    """A wheel of this project, built from a copy of the checkout's package sources (offline)."""
    with tempfile.TemporaryDirectory() as scratch:
        for name in project_sources(REPO_ROOT / "setup.py"):
            source, copy = REPO_ROOT / name, Path(scratch) / name
            if source.is_dir():
                shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(source, copy)
        pip("wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dest), scratch)
    return next(dest.glob(f"{PROJECT}-*.whl"))


def download(entry: Optional[Locked], name: str, version: str, staging: Path, reuse: Path) -> Locked:
    """The file of ``name==version`` (checked against ``entry`` when given) and the wheel made of
    it, in ``staging``; a wheel already in ``reuse`` whose hash matches is copied instead."""
    if entry is not None and not entry.source_only and (reuse / entry.file).exists() \
            and sha256(reuse / entry.file) == entry.sha256:
        shutil.copy2(reuse / entry.file, staging / entry.file)
        return entry
    with tempfile.TemporaryDirectory() as scratch:
        spec = f"{name}=={version}"
        platforms = [argument for platform in PLATFORMS for argument in ("--platform", platform)]
        wheel = ("download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", TARGET["python_version"],
                 "--implementation", "cp", *platforms, "-d", scratch, spec)
        # a wheel where one is locked; unlocked, a wheel if there is one, else the source archive
        if entry is not None and entry.source_only or not pip(*wheel, check=entry is not None):
            pip("download", "-q", "--no-deps", "--no-binary=:all:", "-d", scratch, spec)
        (downloaded,) = Path(scratch).iterdir()
        found = Locked(name, version, downloaded.name, sha256(downloaded), downloaded.stat().st_size, 0)
        if entry is not None and (found.file, found.sha256) != (entry.file, entry.sha256):
            raise SystemExit(f"wheelhouse: {found.file} (sha256 {found.sha256[:12]}...) is not the locked "
                             f"{entry.file} (sha256 {entry.sha256[:12]}...)")
        if found.source_only:  # pure Python published as a source archive only: the wheel is built here
            pip("wheel", "-q", "--no-deps", "-w", str(staging), str(downloaded))
            built = next(staging.glob(f"{re.sub(r'[-.]+', '_', name)}-{version}-*.whl"))
            return Locked(**{**asdict(found), "wheel_bytes": built.stat().st_size})
        shutil.copy2(downloaded, staging / downloaded.name)
        return Locked(**{**asdict(found), "wheel_bytes": found.bytes})


def check_size(total: int, limit_mib: float, what: str) -> None:
    if total > limit_mib * MIB:
        raise SystemExit(f"wheelhouse: {what} {total / MIB:.1f} MiB, over the {limit_mib:g} MiB a call can carry; "
                         f"carry less (benchmarks/device/gpu_machine_packages.txt lists what the machine has)")


def table(entries: List[Locked], project: Path) -> str:
    lines = [f"{'wheel':<78} {'MiB':>6}"]
    for entry in sorted(entries, key=lambda e: e.name):
        built = " (built here from the source archive)" if entry.source_only else ""
        lines.append(f"{entry.file + built:<78} {entry.wheel_bytes / MIB:>6.2f}")
    lines.append(f"{project.name + ' (this checkout)':<78} {project.stat().st_size / MIB:>6.2f}")
    return "\n".join(lines)


def dry_run(args) -> None:
    needs, lock = runtime_needs(), read_lock()
    problems = lock_problems(needs, lock)
    if problems:
        raise SystemExit(f"wheelhouse: the lock is out of date ({'; '.join(problems)}): run "
                         f"python -m benchmarks.device.wheelhouse --update-lock")
    dest = Path(args.dest) if args.dest else Path(tempfile.mkdtemp())
    dest.mkdir(parents=True, exist_ok=True)
    project = project_wheel(dest)
    total = sum(e.wheel_bytes for e in lock.values()) + project.stat().st_size
    check_size(total, args.limit_mib, "the wheelhouse would be")
    print(table(list(lock.values()), project))
    print(f"would carry {len(lock) + 1} wheels, {total / MIB:.1f} MiB of {args.limit_mib:g}; nothing downloaded"
          + (f"; the project's wheel is in {dest}" if args.dest else ""))
    if not args.dest:
        shutil.rmtree(dest)


def build(args) -> None:
    needs, lock = runtime_needs(), read_lock()
    if not args.update_lock:
        problems = lock_problems(needs, lock)
        if problems:
            raise SystemExit(f"wheelhouse: the lock is out of date ({'; '.join(problems)}): run with --update-lock")
        check_size(sum(e.wheel_bytes for e in lock.values()), args.limit_mib, "the locked wheels alone are")
    dest = Path(args.dest or DEFAULT_DEST)
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    entries = [download(None if args.update_lock else lock[name], name, version, staging, dest)
               for name, version in sorted(needs.items()) if name != PROJECT]
    project = project_wheel(staging)
    total = sum(path.stat().st_size for path in staging.iterdir())
    check_size(total, args.limit_mib, "the wheelhouse is")  # before anything replaces the old one
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    if args.update_lock:
        write_lock(entries)
    print(table(entries, dest / project.name))
    print(f"{dest}: {len(entries) + 1} wheels, {total / MIB:.1f} MiB of {args.limit_mib:g}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.device.wheelhouse",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", help=f"the wheelhouse folder (default: {DEFAULT_DEST.name}/ in the checkout; "
                        "--dry-run: where to leave the project's wheel, else nowhere)")
    parser.add_argument("--dry-run", action="store_true", help="check the lock and the size, download nothing")
    parser.add_argument("--update-lock", action="store_true", help="download what is needed now and rewrite the lock")
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help="the most the wheelhouse may weigh")
    args = parser.parse_args(argv)
    dry_run(args) if args.dry_run else build(args)


if __name__ == "__main__":
    main()
