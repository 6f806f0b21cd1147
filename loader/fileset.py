"""The files read so far from one package, under the package-wide caps.

Every intake (directory, archive, upload) adds into a FileSet, which refuses a path outside
the layout, a duplicate, one file too many or one byte too many, and closes every memfd it
holds when the intake fails, so a refused package leaves nothing behind.
"""
from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.loader.sealed import SealedFile


class FileSet:
    def __init__(self, limits: layout.IntakeLimits, total_code: Code):
        self.limits, self.total_code = limits, total_code
        self.files: dict[str, SealedFile] = {}   # model-dir-relative path -> bytes
        self.total = 0
        self.model_dir_name: str | None = None   # where the intake knows it (archive top directory)

    def admit(self, parts: tuple[str, ...], size: int) -> tuple[int, Code]:
        """Check a file before its bytes are read; returns its size cap and the code refusing more."""
        layout.classify(parts)
        path = "/".join(parts)
        if path in self.files:
            raise RtdError(Code.E_ARCHIVE_INVALID, f"{path} appears twice")
        if len(self.files) >= self.limits.max_files:
            raise RtdError(self.total_code, f"more than {self.limits.max_files} files")
        cap, code = layout.size_cap(parts, self.limits)
        if size > cap:
            raise RtdError(code, f"{path} is {size} bytes, over the {cap}-byte cap")
        if self.total + size > self.limits.max_total_bytes:
            raise RtdError(self.total_code, f"package is over {self.limits.max_total_bytes} bytes")
        return cap, code

    def add(self, parts: tuple[str, ...], sealed: SealedFile) -> None:
        self.files["/".join(parts)] = sealed
        self.total += sealed.size
        if self.total > self.limits.max_total_bytes:
            raise RtdError(self.total_code, f"package is over {self.limits.max_total_bytes} bytes")

    def close(self) -> None:
        for sealed in self.files.values():
            sealed.close()
        self.files.clear()
