"""Prepares the GPU kit on a machine with the package registries (this project's CPU machine): the packages the GPU
machine lacks (their wheels fetched into `.gpu_wheels/`, installed for Python 3.12 and packed as `site.tar.xz`) and
the full Fashion-MNIST, in the ignored folder `.gpu_kit/`, then checks that the working tree and
the kit travel within the lent machine's limit (64 MiB) and prints what to carry.

    python benchmarks/gpu_prepare.py            # fetch what is missing, check the size, print the carry list
    python benchmarks/gpu_prepare.py --check    # only the size check

The GPU machine has Python 3.12 with torch, transformers 5.17, accelerate, timm, sentence-transformers, scikit-learn,
pandas and pyarrow, and no network (docs/benchmarks.md, "The GPU kit"). The run (`benchmarks/gpu_run.py`) unpacks
the packed site there and puts it first on the path. Packed, the packages travel in 10.8 MB instead of 24.1 MB of
wheels (2026-11-26), room the working tree's released model folders need.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KIT = Path(".gpu_kit")
WHEELHOUSE = Path(".gpu_wheels")  # ignored, stays here: only the packed site travels
SITE_ARCHIVE = "site.tar.xz"  # gpu_run.py's name for it
LIMIT = 64 * 2**20  # what travels to the lent machine: the working tree and the carried paths together

# What the run imports that the GPU machine lacks or has too old (transformers 5.17 there; the package needs 5.23),
# pinned to the versions the project's tests run with. antlr4-python3-runtime 4.9.3 (hydra's pin) is a source
# distribution only: it is built into a wheel here.
WHEELS = (
    "transformers==5.24.0", "datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19", "fsspec==2026.9.0",
    "evaluate==0.4.6", "mlxtend==0.25.0", "lightly==1.6.0",
    "hydra-core==1.3.8", "omegaconf==2.3.1",
)
BUILT = ("antlr4-python3-runtime==4.9.3",)
PLATFORM = ("--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64")
FASHION_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                       "t10k-labels-idx1-ubyte.gz")
DEBIAN_FOLDER = Path("/usr/share/datasets/fashion-mnist")


def wheel_present(folder: Path, requirement: str) -> bool:
    name, version = requirement.split("==")
    stem = name.replace("-", "_").lower()
    return any(p.name.lower().startswith(f"{stem}-{version}-") for p in folder.glob("*.whl"))


def fetch_wheels(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "-q"]
    for requirement in WHEELS:
        if not wheel_present(folder, requirement):
            subprocess.run([*pip, "download", "--no-deps", "--only-binary=:all:", *PLATFORM, "-d", str(folder),
                            requirement], check=True)
    for requirement in BUILT:
        if not wheel_present(folder, requirement):
            subprocess.run([*pip, "wheel", "--no-deps", "-w", str(folder), requirement], check=True)


def pack_site(wheels: Path, archive: Path) -> None:
    """The wheels installed as pip installs them on the lent machine (Python 3.12, no bytecode), with `.installed`
    naming them, packed with xz into `archive`; kept while no wheel is newer than it."""
    found = sorted(wheels.glob("*.whl"))
    if archive.is_file() and all(w.stat().st_mtime <= archive.stat().st_mtime for w in found):
        return
    with tempfile.TemporaryDirectory() as scratch:
        site = Path(scratch) / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--only-binary=:all:", *PLATFORM, "--target", str(site), *map(str, found)], check=True)
        (site / ".installed").write_text("\n".join(w.name for w in found))
        archive.parent.mkdir(parents=True, exist_ok=True)  # a fresh checkout has no kit folder yet
        partial = archive.with_suffix(".partial")
        with tarfile.open(partial, "w:xz", preset=9 | lzma.PRESET_EXTREME) as packed:
            for path in sorted(site.iterdir()):
                packed.add(path, arcname=path.name)
        partial.replace(archive)


def fetch_fashion_mnist(folder: Path) -> None:
    """The four IDX files of Debian's dataset-fashion-mnist: from the installed package, else its .deb unpacked."""
    folder.mkdir(parents=True, exist_ok=True)
    if all((folder / name).is_file() for name in FASHION_MNIST_FILES):
        return
    source = DEBIAN_FOLDER
    with tempfile.TemporaryDirectory() as scratch:
        if not all((source / name).is_file() for name in FASHION_MNIST_FILES):
            subprocess.run(["apt-get", "download", "dataset-fashion-mnist"], cwd=scratch, check=True)
            [deb] = Path(scratch).glob("dataset-fashion-mnist_*.deb")
            subprocess.run(["dpkg", "-x", str(deb), str(Path(scratch) / "root")], check=True)
            source = Path(scratch) / "root" / DEBIAN_FOLDER.relative_to("/")
        for name in FASHION_MNIST_FILES:
            shutil.copyfile(source / name, folder / name)


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def travelling_bytes(repo: Path, carry: list[str]) -> dict[str, int]:
    """Bytes that travel: the working tree (tracked files and untracked ones git does not ignore) and each carried
    path, by name."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, check=True).stdout.decode().split("\0")
    tree = sum((repo / name).stat().st_size for name in listed if name and (repo / name).is_file())
    return {"working tree": tree, **{name: folder_bytes(repo / name) for name in carry}}


def check_size(repo: Path, carry: list[str], limit: int = LIMIT) -> int:
    """Prints the sizes and returns the total; raises SystemExit when it is over `limit`."""
    sizes = travelling_bytes(repo, carry)
    total = sum(sizes.values())
    for name, size in sizes.items():
        print(f"  {name:<14} {size / 2**20:8.2f} MiB")
    print(f"  {'total':<14} {total / 2**20:8.2f} MiB of {limit / 2**20:.0f} MiB")
    if total > limit:
        raise SystemExit(f"gpu_prepare: {total / 2**20:.2f} MiB would travel, over the {limit / 2**20:.0f} MiB limit; "
                         "carry less (or ignore large files of the working tree).")
    return total


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="Only check the size of what travels.")
    args = parser.parse_args(argv)
    if not args.check:
        fetch_wheels(REPO / WHEELHOUSE)
        pack_site(REPO / WHEELHOUSE, REPO / KIT / SITE_ARCHIVE)
        fetch_fashion_mnist(REPO / KIT / "data" / "fashion-mnist")
    check_size(REPO, [str(KIT)])
    print(f"carry: [\"{KIT}\"]   command: python3 benchmarks/gpu_run.py --out $OUT")


if __name__ == "__main__":
    main()
