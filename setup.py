"""Maps the top-level folders onto the rtd.* namespace; every folder with an __init__.py is a package.
Builds the compiled CPU kernels (kernels/native, cffi), the GPU worker's SIGSYS handler (sandbox/sigsys.c) and the
HTTP/2 session over libnghttp2 (daemon/transport/h2session.c)
at install time: the service compiles nothing."""
import pathlib

from setuptools import setup

FOLDERS = {"rtd": "rtd", "rtd.cli": "cli", "rtd.loader": "loader", "rtd.kernels": "kernels", "rtd.sandbox": "sandbox",
           "rtd.daemon": "daemon", "rtd.policies": "policies"}


def packages():
    for package, folder in FOLDERS.items():
        for init in sorted(pathlib.Path(folder).rglob("__init__.py")):
            yield ".".join((package, *init.parent.relative_to(folder).parts))


setup(packages=list(packages()), package_dir=FOLDERS,
      cffi_modules=["kernels/native/build_native.py:ffibuilder", "sandbox/build_sigsys.py:ffibuilder",
                    "daemon/transport/build_h2session.py:ffibuilder"])
