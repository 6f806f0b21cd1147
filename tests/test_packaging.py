"""What pyproject.toml promises matches what ships: the protobuf floor is at least the
runtime the generated code demands, and every package-data pattern matches a file."""
import glob
import os
import re
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = {"rtd": "rtd", "rtd.loader": "loader", "rtd.kernels": "kernels", "rtd.sandbox": "sandbox",
           "rtd.daemon": "daemon", "rtd.policies": "policies"}   # as setup.py maps them


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _folder(package: str) -> str:
    top = max((p for p in FOLDERS if package == p or package.startswith(p + ".")), key=len)
    return os.path.join(ROOT, FOLDERS[top], *package[len(top):].split(".")[1:])


def test_the_protobuf_floor_is_what_the_generated_code_checks():
    floor = next(d for d in _project()["project"]["dependencies"] if d.startswith("protobuf"))
    pinned = tuple(map(int, re.search(r">=([\d.]+)", floor).group(1).split(".")))
    for path in glob.glob(os.path.join(ROOT, "rtd", "proto", "*_pb2.py")):
        with open(path) as f:
            major, minor, patch = map(int, re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", f.read()).groups())
        assert pinned >= (major, minor, patch), f"{floor} admits a protobuf older than {path} needs"


def test_every_package_data_pattern_ships_a_file():
    for package, patterns in _project()["tool"]["setuptools"]["package-data"].items():
        for pattern in patterns:
            assert glob.glob(os.path.join(_folder(package), pattern)), f"{package}: {pattern} matches nothing"
